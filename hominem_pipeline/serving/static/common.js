// What the service's pages share: the element lookup, the status line and the API call (with the token the
// page keeps in localStorage). Loaded before each page's own script.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);

function status(text, isError = false) {
  const el = $("#status");
  el.textContent = text;
  el.className = isError ? "error" : "muted";
}

async function api(path, body) {
  const headers = { "Content-Type": "application/json" };
  const token = localStorage.getItem("hominem-token");
  if (token) headers.Authorization = "Bearer " + token;
  const response = await fetch(path, body === undefined ? { headers } : { method: "POST", headers, body: JSON.stringify(body) });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = (data.error && data.error.message) || response.statusText;
    throw new Error(`${response.status}: ${message}`);
  }
  return data;
}

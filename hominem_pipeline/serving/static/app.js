// The feedback page: chat with the student; rate, compare, nudge and label its replies.
// Plain JavaScript against the service's own API (/config, /generate, /feedback, ...); no build step.
"use strict";

// Each emotion tag in plain words (the model's own term is the tooltip), with an emoji that is dropped where
// the machine has no emoji font (see `emojiShown`): the words alone carry the meaning.
const EMOTIONS = {
  high_arousal: ["🚀", "stirred up"], low_arousal: ["😴", "calm, low energy"], predictive_discrepancy: ["💔", "not what I expected"],
  prospect_heavy: ["⏳", "about what comes next"], reflection_heavy: ["🪞", "about what happened"],
  high_social_broadcast: ["🤗", "want to share it"], low_social_broadcast: ["🎭", "keep it to myself"],
};

// Whether this browser draws emoji in colour; without an emoji font they are empty boxes, and the page
// then shows the words beside them alone (body.no-emoji).
function emojiShown() {
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = 32;
  const ctx = canvas.getContext("2d");
  if (!ctx) return true;
  ctx.font = "24px sans-serif";
  ctx.textBaseline = "top";
  ctx.fillText("👍", 0, 0);
  const px = ctx.getImageData(0, 0, 32, 32).data;
  for (let i = 0; i < px.length; i += 4) {
    if (px[i + 3] > 0 && (Math.abs(px[i] - px[i + 1]) > 40 || Math.abs(px[i + 1] - px[i + 2]) > 40)) return true;  // a coloured pixel
  }
  return false;
}

// A short confirmation beside what it is about: the reply card (or the choice box) it was given on.
function confirmNear(el, text, failed = false) {
  if (!el) return;
  let note = $(".confirm", el);
  if (!note) {
    note = document.createElement("p");
    note.className = "confirm";
    note.setAttribute("role", "status");
    el.appendChild(note);
  }
  note.textContent = failed ? `not saved: ${text}` : `✓ saved: ${text}`;
  note.classList.toggle("failed", failed);
}
const state = { config: null, messages: [], session: newId(), choiceCount: 0 };

function newId() {
  return (crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random().toString(16).slice(2)).replace(/-/g, "");
}

// Feedback is sent with its own id, so a retry after a lost answer is written once; `near`: the card the
// confirmation is shown on.
async function sendFeedback(event, what, near = null) {
  const body = { id: newId(), ...event };
  for (let attempt = 0; ; attempt++) {
    try {
      const result = await api("/feedback", body);
      status(`saved: ${what}`);
      confirmNear(near, what);
      return result;
    } catch (error) {
      if (attempt >= 2 || !/^(5\d\d|Failed|NetworkError)/.test(error.message)) {
        status(`not saved (${what}): ${error.message}`, true);
        confirmNear(near, `${what} (${error.message})`, true);
        throw error;
      }
      await new Promise((r) => setTimeout(r, 500 * (attempt + 1)));
    }
  }
}

function scoresView(reward) {
  const box = document.createElement("div");
  if (!reward) {
    box.textContent = state.config && state.config.reward_model ? "(empty reply: not scored)" : "(no reward model served)";
    box.className = "muted";
    return box;
  }
  const head = document.createElement("div");
  head.className = "headline";
  head.textContent = `scalar ${reward.scalar.toFixed(2)} · intensity ${reward.reward_intensity.toFixed(2)} · safety ${reward.safety_score.toFixed(2)}`;
  box.appendChild(head);
  for (const [name, value] of Object.entries(reward.vector)) {
    const row = document.createElement("div");
    row.className = "bar";
    row.dataset.dimension = name;
    const width = Math.round(Math.abs(value) * 50);
    row.innerHTML = `<span class="name"></span><span class="track"><span class="fill ${value < 0 ? "neg" : "pos"}" style="width:${width}%;${value < 0 ? `margin-left:${50 - width}%` : "margin-left:50%"}"></span></span><span class="value"></span>`;
    $(".name", row).textContent = name;
    $(".value", row).textContent = (value >= 0 ? "+" : "") + value.toFixed(2);
    box.appendChild(row);
  }
  return box;
}

// A reply's markdown as DOM nodes: paragraphs, "-"/"*"/"1." lists, **bold**, *italic*, `code`. Text only
// ever goes in through textContent, so whatever the model writes cannot become markup.
function inlineMarkdown(parent, text) {
  const pattern = /(\*\*[^*\n]+\*\*|__[^_\n]+__|`[^`\n]+`|\*[^*\s][^*\n]*\*|_[^_\s][^_\n]*_)/g;
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    parent.append(text.slice(last, match.index));
    const token = match[0];
    const [tag, inner] = token.startsWith("**") || token.startsWith("__") ? ["strong", token.slice(2, -2)]
      : token.startsWith("`") ? ["code", token.slice(1, -1)] : ["em", token.slice(1, -1)];
    const el = document.createElement(tag);
    el.textContent = inner;
    parent.append(el);
    last = match.index + token.length;
  }
  parent.append(text.slice(last));
}

function renderMarkdown(box, text) {
  box.replaceChildren();
  let list = null;
  for (const line of text.split("\n")) {
    const item = line.match(/^\s*(?:[-*\u2022]|(\d+)[.)])\s+(.*)$/);
    if (item) {
      const kind = item[1] ? "OL" : "UL";
      if (!list || list.tagName !== kind) {
        list = document.createElement(kind.toLowerCase());
        box.append(list);
      }
      const li = document.createElement("li");
      inlineMarkdown(li, item[2]);
      list.append(li);
      continue;
    }
    list = null;
    if (!line.trim()) continue;
    const p = document.createElement("p");
    inlineMarkdown(p, line.replace(/^#+\s+/, ""));
    box.append(p);
  }
}

function replyCard(reply, label) {
  const card = $("#reply-template").content.firstElementChild.cloneNode(true);
  card.dataset.turn = reply.turn;
  $(".label", card).textContent = label;
  if (reply.text) renderMarkdown($(".text", card), reply.text);
  else $(".text", card).textContent = "(empty reply)";
  $(".scores", card).appendChild(scoresView(reply.reward));
  for (const button of card.querySelectorAll(".thumb")) {
    button.onclick = () => sendFeedback({ kind: "thumb", turn: reply.turn, value: button.dataset.value }, `thumb ${button.dataset.value}`, card)
      .then(() => button.classList.add("done")).catch(() => {});
  }
  const select = $(".dimension", card);
  for (const name of state.config.dimensions) select.add(new Option(name, name));
  for (const button of card.querySelectorAll(".nudge button")) {
    button.onclick = () => sendFeedback({ kind: "nudge", turn: reply.turn, dimension: select.value, direction: button.dataset.direction },
      `${button.dataset.direction} ${select.value}`, card).then(() => button.classList.add("done")).catch(() => {});
  }
  const tags = $(".tags", card);
  for (const tag of state.config.emotion_tags) {
    const item = document.createElement("label");
    const [emoji, words] = EMOTIONS[tag] || ["", tag.replace(/_/g, " ")];
    item.title = tag.replace(/_/g, " ");  // the model's own term
    item.innerHTML = `<input type="checkbox" value="${tag}"> <span class="emoji" aria-hidden="true">${emoji}</span> `;
    item.append(words);
    tags.appendChild(item);
  }
  let valence = null;
  for (const button of card.querySelectorAll("[data-valence]")) {
    button.onclick = () => {
      valence = Number(button.dataset.valence);
      card.querySelectorAll("[data-valence]").forEach((b) => b.classList.toggle("selected", b === button));
    };
  }
  $(".send-emotion", card).onclick = () => {
    const chosen = [...tags.querySelectorAll("input:checked")].map((i) => i.value);
    sendFeedback({ kind: "emotion", turn: reply.turn, valence, tags: chosen }, "emotion labels", card).catch(() => {});
  };
  return card;
}

function choiceBox(a, b, onChosen, repeatOf) {
  const box = $("#choice-template").content.firstElementChild.cloneNode(true);
  const group = "c" + state.choiceCount++;
  box.querySelectorAll('input[name="pick"]').forEach((i) => (i.name = "pick-" + group));
  box.querySelectorAll('input[name="strength"]').forEach((i) => (i.name = "strength-" + group));
  $(".submit-choice", box).onclick = async () => {
    const pick = $(`input[name="pick-${group}"]:checked`, box);
    if (!pick) return status("choose A or B first", true);
    const [chosen, rejected] = pick.value === "A" ? [a, b] : [b, a];
    const event = { kind: "choice", chosen: chosen.turn, rejected: rejected.turn, strength: $(`input[name="strength-${group}"]:checked`, box).value };
    const note = $(".note", box).value.trim();
    if (note) event.note = note;
    if (repeatOf) event.repeat_of = repeatOf;
    try {
      await sendFeedback(event, `${pick.value} over ${pick.value === "A" ? "B" : "A"} (${event.strength})`, box);
    } catch { return; }
    box.classList.add("done");
    box.querySelectorAll("input, textarea, button").forEach((el) => (el.disabled = true));
    onChosen(chosen);
    refreshConsistency();
    offerRepeat();
  };
  return box;
}

function addUser(text) {
  const el = document.createElement("div");
  el.className = "user card";
  el.textContent = text;
  $("#chat").appendChild(el);
}

async function send(event) {
  event.preventDefault();
  const text = $("#message").value.trim();
  if (!text) return;
  const pair = $("#pair-mode").checked;
  state.messages.push({ role: "user", content: text });
  addUser(text);
  $("#message").value = "";
  $("#send").disabled = true;
  const started = Date.now();
  const writing = () => status(`${pair ? "writing two replies" : "writing"}… ${Math.round((Date.now() - started) / 1000)} s`);
  writing();
  const ticker = setInterval(writing, 1000);
  try {
    const result = await api("/generate", { messages: state.messages, n: pair ? 2 : 1, adapter: !$("#base-mode").checked, session: state.session });
    const chat = $("#chat");
    if (pair) {
      const [a, b] = result.replies;
      const pairBox = document.createElement("div");
      pairBox.className = "pair";
      pairBox.append(replyCard(a, "A"), replyCard(b, "B"));
      chat.append(pairBox, choiceBox(a, b, (chosen) => state.messages.push({ role: "assistant", content: chosen.text })));
    } else {
      chat.appendChild(replyCard(result.replies[0], result.adapter ? "student + adapter" : "base"));
      state.messages.push({ role: "assistant", content: result.replies[0].text });
    }
    status("");
    chat.lastElementChild.scrollIntoView({ behavior: "smooth", block: "end" });
  } catch (error) {
    state.messages.pop();
    status(`no reply: ${error.message}`, true);
  } finally {
    clearInterval(ticker);
    $("#send").disabled = false;
  }
}

async function offerRepeat() {
  const section = $("#repeat");
  const { repeat } = await api("/feedback/repeat").catch(() => ({ repeat: null }));
  if (!repeat) return;
  section.hidden = false;
  $(".prompt", section).textContent = repeat.messages[repeat.messages.length - 1].content;
  const pair = $(".pair", section);
  pair.replaceChildren(replyCard(repeat.a, "A"), replyCard(repeat.b, "B"));
  const old = $(".choice", section);
  if (old) old.remove();
  section.appendChild(choiceBox(repeat.a, repeat.b, () => setTimeout(() => (section.hidden = true), 800), repeat.repeat_of));
}

async function askPair() {
  const section = $("#asked");
  let next;
  try {
    next = await api("/feedback/next");
  } catch (error) {
    return status(`no pair to ask: ${error.message}`, true);
  }
  if (!next.question) {
    section.hidden = true;
    return status(next.reason);
  }
  const q = next.question;
  section.hidden = false;
  $(".why", section).textContent = next.reason;
  $(".prompt", section).textContent = q.messages[q.messages.length - 1].content;
  $(".pair", section).replaceChildren(replyCard(q.a, "A"), replyCard(q.b, "B"));
  const old = $(".choice", section);
  if (old) old.remove();
  section.appendChild(choiceBox(q.a, q.b, () => setTimeout(askPair, 800)));
  section.scrollIntoView({ behavior: "smooth", block: "start" });
}

async function refreshConsistency() {
  const stats = await api("/feedback/consistency").catch(() => null);
  if (!stats) return;
  $("#consistency").textContent = stats.repeats
    ? `your consistency: ${Math.round(100 * stats.consistency)}% of ${stats.repeats} repeated choices`
    : `${stats.choices} choice(s) made`;
  const taste = await api("/me/taste").catch(() => null);
  $("#taste").textContent = taste && taste.choices ? `what it learned of you: ${taste.said}` : "";
  const update = taste && taste.update;
  $("#taste-update").textContent = update ? update.said : "";
  $("#taste-update").classList.toggle("error", Boolean(update && !update.live && update.cost.length));
  const ex = taste && taste.example;
  $("#taste").title = ex
    ? `on a message you never taught, "${ex.message}"\nbefore your updates: ${ex.before}\nnow: ${ex.after}`
    : "what the service has learned of your taste from your choices (GET /me/taste)";
}

async function start() {
  document.body.classList.toggle("no-emoji", !emojiShown());
  const tokenInput = $("#token");
  tokenInput.value = localStorage.getItem("hominem-token") || "";
  tokenInput.onchange = () => { localStorage.setItem("hominem-token", tokenInput.value.trim()); start(); };
  try {
    state.config = await api("/config");
  } catch (error) {
    return status(`cannot reach the service: ${error.message}`, true);
  }
  $("#token-box").hidden = !state.config.token_required;
  $("#served").textContent = `adapter: ${state.config.adapter || "none (base)"} · reward model: ${state.config.reward_model || "none"}`;
  $("#composer").onsubmit = send;
  $("#message").onkeydown = (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("#composer").requestSubmit(); } };
  $("#ask-pair").onclick = askPair;
  $("#new-chat").onclick = () => { state.messages = []; state.session = newId(); $("#chat").replaceChildren(); status("new conversation"); };
  refreshConsistency();
  document.body.dataset.ready = "1";
}

start();

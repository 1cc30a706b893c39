// The dashboard: six views over the project's files (/dashboard/api/*), charts drawn with uPlot
// (installed by the project's own `make install`, scripts/vendor_js.py; nothing from a CDN). No build step.
"use strict";

const COLOURS = ["#3457d5", "#d0584b", "#2f9e6f", "#e8590c", "#7048e8", "#1098ad", "#c2255c", "#5c940d", "#495057"];
const charts = {};  // id -> {chart, series, points}: what each view drew (the browser test reads it)
window.hominemCharts = charts;

const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
const pct = (v) => (v === null || v === undefined ? "–" : `${(100 * v).toFixed(1)}%`);
const num = (v, d = 3) => (v === null || v === undefined ? "–" : Number(v).toFixed(d));
const dayTs = (d) => Date.parse(d + "T00:00:00Z") / 1000;  // a day at its own tick (the axis is in UTC, as the partitions are)
const TIE = 1e-6;  // scalars closer than this are a tie (the same reply scored in two batches differs in the last digits)

const DAY = 86400;
const dayLabel = (ts) => new Date(ts * 1000).toISOString().slice(0, 10);

// The x axis: per-day data on whole days (ticks a day or more apart, each a date); `categories` (a bar per
// name: the dimensions, the figures compared) one tick per bar, its name, slanted to fit.
function xAxis(kind, xLabel, categories) {
  if (categories) {
    const long = Math.max(...categories.map((c) => c.length));
    return { label: xLabel, splits: () => categories.map((_, i) => i + 1), values: (u, splits) => splits.map((v) => categories[v - 1] ?? ""),
             rotate: long > 6 ? -30 : 0, size: long > 6 ? Math.min(160, 20 + long * 6) : 40, gap: 4 };
  }
  if (kind === "time") return { label: xLabel, incrs: [DAY, 2 * DAY, 7 * DAY, 14 * DAY, 30 * DAY, 91 * DAY, 365 * DAY], values: (u, splits) => splits.map(dayLabel), space: 70 };
  return { label: xLabel };
}

// One uPlot chart in `id`: x values and named series ({label, values, colour, points, dash}); kind "time"
// (x: days) or "linear"; `categories`: one name per x (1..n), drawn as the axis's ticks.
function draw(id, x, series, { kind = "time", yRange = null, xLabel = "", yLabel = "", bars = false, categories = null } = {}) {
  const el = document.getElementById(id);
  if (charts[id]) { charts[id].chart.destroy(); delete charts[id]; }
  el.innerHTML = "";
  if (!x.length || !series.length) { el.innerHTML = '<p class="muted">nothing measured yet</p>'; return; }
  const width = Math.max(320, el.clientWidth || el.parentElement.clientWidth || 600);
  const xScale = categories ? { time: false, range: [0.4, categories.length + 0.6] }
    // days: half a day of room each side (the first and last dates fit); one day alone: a week around it, not the years uPlot would span
    : { time: kind === "time", ...(kind === "time" ? { range: x.length === 1 ? [x[0] - 3.5 * DAY, x[0] + 3.5 * DAY] : [Math.min(...x) - DAY / 2, Math.max(...x) + DAY / 2] } : {}) };
  const opts = {
    width, height: categories ? 300 : 250,
    ...(kind === "time" && !categories ? { tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC") } : {}),
    scales: { x: xScale, y: yRange ? { range: yRange } : {} },
    axes: [xAxis(kind, xLabel, categories), { label: yLabel }],
    series: [{}, ...series.map((s, i) => ({
      label: s.label, stroke: s.colour || COLOURS[i % COLOURS.length], width: s.width || 2, dash: s.dash,
      points: { show: s.points ?? x.length < 40, size: 6 }, spanGaps: true,
      ...(bars ? { paths: uPlot.paths.bars({ size: [0.6, 40] }), fill: (s.colour || COLOURS[i % COLOURS.length]) + "99" } : {}),
    }))],
  };
  const chart = new uPlot(opts, [x, ...series.map((s) => s.values.map((v) => (v === undefined ? null : v)))], el);
  charts[id] = { chart, series: series.length, points: series.reduce((n, s) => n + s.values.filter((v) => v !== null && v !== undefined).length, 0) };
}

function table(el, head, rows) {
  el.innerHTML = `<thead><tr>${head.map((h) => `<th>${esc(h)}</th>`).join("")}</tr></thead><tbody>${rows.map((r) => `<tr>${r.map((c) => (typeof c === "object" && c !== null ? `<td class="${c.cls || ""}">${c.html}</td>` : `<td>${esc(c)}</td>`)).join("")}</tr>`).join("")}</tbody>`;
}

const views = {
  async timeline() {
    const t = await api("/dashboard/api/timeline");
    const x = t.days.map(dayTs), s = t.series;
    draw("chart-agreement", x, [
      { label: "people: agreement", values: s.people_agreement }, { label: "people: ECE", values: s.people_ece, dash: [6, 4] },
      { label: "people, between the student's own replies", values: s.served_agreement, colour: "#2f9e6f", dash: [2, 3] },
      { label: "judge: agreement", values: s.judge_agreement, colour: "#868e96" }, { label: "judge: ECE", values: s.judge_ece, colour: "#adb5bd", dash: [6, 4] },
    ], { yRange: [0, 1] });
    draw("chart-rhi", x, [{ label: "RHI", values: s.rhi, width: 3, colour: "#1d1f23" }, ...["dcs", "gvs", "mss", "cdrs", "lrps"].map((k) => ({ label: k.toUpperCase(), values: s[k], width: 1 }))], { yRange: [0, 1] });
    draw("chart-adapter", x, [
      { label: "win rate over the base", values: s.win_rate }, { label: "people's held-out pairs", values: s.people_accuracy },
      { label: "probes: trade-offs as written", values: s.probe_tradeoffs_as_expected, dash: [4, 4] },
    ], { yRange: [0, 1] });
    const mark = { promote: "▲ promoted", rollback: "▼ rolled back", refuse: "× refused", freeze: "❄ froze", unfreeze: "unfroze", adjust: "⚙ slow loop" };
    table($("#events"), ["time", "what", "version", "why"], t.events.slice().reverse().map((e) => [e.time, mark[e.action] || e.action, e.version || "base", e.reason || ""]));
    const figures = (f) => Object.entries(f).filter(([, v]) => v !== null && v !== undefined).map(([k, v]) => `${k.replace(/_/g, " ")} ${k.includes("ece") ? num(v) : pct(v)}`).join(" · ");
    table($("#builds"), ["built", "version", "from", "figures", "live"], t.builds.map((b) => [(b.created_at || "").replace("T", " ").slice(0, 16), `${b.asset}/${b.day}/${b.version}`,
      b.reward_model || "", figures(b.figures), b.live.map((a) => mark[a] || a).join(" ")]));
    status(`${t.days.length} day(s), ${t.builds.length} version(s), ${t.events.length} live event(s)`);
  },

  async calibration() {
    const c = await api("/dashboard/api/calibration");
    for (const group of ["people", "judge"]) {
      const curves = c.curves.filter((k) => k.group === group);
      const xs = [...new Set(curves.flatMap((k) => k.bins.map((b) => +b.confidence.toFixed(3))))].sort((a, b) => a - b);
      const series = curves.map((k) => {
        const at = new Map(k.bins.map((b) => [+b.confidence.toFixed(3), b.accuracy]));
        return { label: `${k.day} (ECE ${num(k.ece)})`, values: xs.map((v) => (at.has(v) ? at.get(v) : null)), points: true };
      });
      if (curves.length) series.push({ label: "perfect", values: xs, colour: "#adb5bd", dash: [4, 4], points: false });
      draw(`chart-cal-${group}`, xs, series, { kind: "linear", yRange: [0, 1], xLabel: "predicted P(chosen)", yLabel: "share chosen" });
    }
    table($("#cal-table"), ["day", "reward model", "pairs of", "pairs", "agreement", "ECE"], c.curves.map((k) => [k.day, k.reward_model || "", k.group, k.pairs, pct(k.agreement), num(k.ece)]));
    status(`${c.curves.length} reliability curve(s)`);
  },

  async drift() {
    const d = await api("/dashboard/api/drift");
    const a = d.asked || { answers: 0 };
    $("#asked-note").textContent = a.answers
      ? `${a.answers} answer(s) to asked pairs: ${a.by_information} picked by information, ${a.at_random} at random`
        + (a.random_rate === null ? "" : ` (a random pick brings ${num(a.random_rate)} bits on average)`)
      : "no answers to asked pairs yet";
    draw("chart-asked", a.answers ? a.count : [], [{ label: "as asked", values: a.as_asked || [] }]
      .concat(a.if_at_random ? [{ label: "if asked at random", values: a.if_at_random, colour: "#adb5bd", dash: [4, 4], points: false }] : []),
      { kind: "linear", xLabel: "answers", yLabel: "expected information, bits (summed)" });
    if (!d.day) { $("#drift-box").innerHTML = '<p class="muted">no attunement built yet (`hominem run`)</p>'; status("no attunement yet"); return; }
    const drifted = (d.drift && d.drift.drifted) || [];
    $("#drift-box").innerHTML = `<h3>Drift on ${esc(d.day)} <span class="muted">(reference ${esc(d.drift.reference.join(" to "))}, recent ${esc(d.drift.recent.join(" to "))})</span></h3>`
      + (drifted.length ? `<ul>${drifted.map((x) => `<li class="bad">${esc(x.scope)}: ${esc(x.says)}</li>`).join("")}</ul>` : '<p class="good">nothing drifted</p>');
    const clusters = d.clusters || [];
    draw("chart-clusters", clusters.map((_, i) => i + 1), [{ label: "pairs now", values: clusters.map((c) => c.size) }, { label: "yesterday", values: clusters.map((c) => c.previous_size ?? null), colour: "#adb5bd" }],
      { kind: "linear", bars: true, xLabel: "cluster", yLabel: "pairs", categories: clusters.map((c, i) => `${i + 1}. ${c.name}`.slice(0, 28)) });
    $("#clusters").innerHTML = clusters.map((c, i) => `<div class="card"><b>${i + 1}. ${esc(c.name)}</b> <span class="tag">${esc(c.status)}</span> ${c.size} pair(s)`
      + ` <span class="muted">${esc(c.dimension || "")} ${c.tag ? "· " + esc(c.tag) : ""}</span>`
      + (c.examples || []).slice(0, 2).map((e) => `<p class="muted">${esc(e.prompt || "")}<br>chosen: ${esc(e.chosen || "")}<br>rejected: ${esc(e.rejected || "")}</p>`).join("")
      + (c.examples_hidden ? `<p class="muted">${c.examples_hidden} example(s) from other people's pairs are shown to admins only</p>` : "") + "</div>").join("")
      || '<p class="muted">no error clusters (too few errors in the window)</p>';
    status(`drift of ${d.day}: ${drifted.length} finding(s), ${clusters.length} cluster(s)`);
  },

  async compare() {
    const o = await api("/dashboard/api/options");
    const kind = $("#compare-kind");
    const fill = () => {
      const list = o[kind.value] || [];
      for (const [sel, pick] of [[$("#compare-a"), list.length - 2], [$("#compare-b"), list.length - 1]]) {
        sel.innerHTML = list.map((v) => `<option>${esc(v.label)}</option>`).join("");
        sel.selectedIndex = Math.max(0, pick);
      }
    };
    kind.onchange = async () => { fill(); await compareIfTwo(o); };
    fill();
    $("#compare-form").onsubmit = async (ev) => { ev.preventDefault(); await compareIfTwo(o); };
    await compareIfTwo(o);
  },

  async probe() {
    $("#probe-form").onsubmit = async (ev) => {
      ev.preventDefault();
      const replies = [...document.querySelectorAll(".probe-reply")].map((t) => t.value.trim()).filter(Boolean);
      const prompt = $("#probe-prompt").value;
      try {
        // three requests, each drawn as it arrives: the scores, each reply's attribution, the first reply's rewrites
        status("scoring…");
        const p = await api("/dashboard/api/probe", { prompt, replies });
        showProbe(p);
        for (let i = 0; i < replies.length; i++) {
          status(`attribution of reply ${i + 1} (each word group left out in turn)…`);
          showAttribution(i, await api("/dashboard/api/probe/attribution", { prompt, reply: replies[i] }));
        }
        status("rewriting reply 1…");
        const rewrites = [];
        for (const changes of [["typos", "paraphrase", "insertion", "reorder"], ["polite_frame", "rude_frame"]]) {  // each request under 2 s
          rewrites.push(...(await api("/dashboard/api/probe/rewrites", { prompt, reply: replies[0], changes })).counterfactuals);
          showRewrites({ counterfactuals: rewrites });
        }
        status("probed");
      } catch (e) { status(e.message, true); }
    };
    status("type a message and one or two replies");
  },

  async health() {
    const h = await api("/dashboard/api/health");
    draw("chart-health", h.trend.days.map(dayTs), [{ label: "RHI", values: h.trend.rhi, width: 3 }], { yRange: [0, 1] });
    const means = Object.fromEntries(h.patterns.map((p) => [p.pattern, p.means]));
    $("#health-pattern").innerHTML = h.pattern ? `Pattern over the last days: <b>${esc(h.pattern)}</b>: ${esc(means[h.pattern])}` : '<span class="muted">no named pattern in the last days (sharp drop, oscillation, flat near 0.5 or 1.0)</span>';
    table($("#components"), ["component", "value", "against the panel's healthy days", "what a low value means"], h.components.map((c) => [c.name,
      { html: num(c.value), cls: "num " + (c.below ? "bad" : c.verdict ? "good" : "") },
      { html: c.verdict ? esc(c.verdict) + (c.below ? " <b>(refused)</b>" : "") : '<span class="muted">no healthy range (health.calibration: null)</span>', cls: c.below ? "bad" : "" },
      c.meaning]));
    $("#health-verdict").innerHTML = h.rhi === null ? "" : `RHI ${num(h.rhi)} of ${esc(h.day)}` + (h.threshold !== null && h.threshold !== undefined ? ` against ${esc(h.threshold_from)} ${num(h.threshold)}` : "")
      + (h.deploy === null ? "" : h.deploy ? ': <b class="good">may go live</b>' : `: <b class="bad">refused</b> (${esc(h.reason || "")})`);
    const g = h.gate, pct = (x) => (x === null || x === undefined || !isFinite(x) ? "n/a" : `${(100 * x).toFixed(1)}%`);
    $("#gate-head").innerHTML = g.version ? `The gate that decided what is served: <b>${esc(g.action)}</b> of ${esc(g.version)} (${esc(g.time)}).` : '<span class="muted">no gate with sampled checks has run yet</span>';
    table($("#gate-checks"), ["check", "figure", "compared with", "difference ± SE", "items", "detects a drop of", "verdict"], g.checks.map((c) => [c.what,
      { html: pct(c.candidate), cls: "num" }, `${c.reference_name}: ${pct(c.reference)}`,
      { html: `${c.difference >= 0 ? "+" : ""}${pct(c.difference)} ± ${pct(c.standard_error)}`, cls: "num" }, { html: String(c.items), cls: "num" },
      { html: pct(c.detectable_drop), cls: "num" },
      { html: c.refused ? `<b>refused</b> (upper bound ${pct(c.upper_bound)} below −${pct(c.margin)} at ${pct(c.confidence)})` : c.checked ? "passed" : "reported", cls: c.refused ? "bad" : c.checked ? "good" : "" }]));
    const tr = h.gate_trend;
    draw("chart-gate-trend", tr.gates.map((_, i) => i + 1), Object.entries(tr.series).map(([name, s]) => ({ label: s.what, values: s.values, width: name.startsWith("taste:") || name.startsWith("choices:") ? 3 : 1.5 })),
      { kind: "linear", yRange: [0, 1], xLabel: "gate" });
    const newest = tr.gates[tr.gates.length - 1];
    $("#gate-trend-note").textContent = newest ? `gate 1: ${tr.gates[0].time}; gate ${tr.gates.length}: ${newest.time} (${newest.action} ${newest.version})` : "";
    table($("#actions"), ["time", "action", "version", "reason"], h.actions.slice().reverse().map((a) => [a.time, a.action, a.version || "base", a.reason || ""]));
    const sl = h.slow_loop;
    $("#slow-loop").innerHTML = (sl.in_force.length ? `<p class="bad">In force: <b>${sl.in_force.map(esc).join(", ")}</b> (the next adapters train at ${sl.lr_factor}× the learning rate, ${sl.rank_factor}× the LoRA rank); rising nights undo them.</p>`
      : '<p class="good">No slow-loop step in force: the next adapters train with the configured learning rate and rank.</p>')
      + (sl.nights.length ? `<p class="muted">Nightly RHI: ${sl.nights.map((n) => `${esc(n.day.slice(5))} ${num(n.rhi)}`).join(" · ")}</p>` : '<p class="muted">no night judged yet</p>')
      + (sl.actions.length ? `<ul>${sl.actions.map((a) => `<li>${esc(a.night)}: <b>${esc(a.step)}</b>: ${esc(a.reason || "")}</li>`).join("")}</ul>` : "");
    const r = h.retrain;
    $("#retrain").innerHTML = !r ? '<p class="muted">No tick yet: the sensor runs wherever a Dagster daemon runs (make ui, deploy/; retrain.sensor).</p>'
      : `<p>Last tick ${esc(r.time)}: <b>${esc(r.reason)}</b></p>`
      + `<p>Since the last retrain: ${r.since_last_retrain.conversations} of ${r.thresholds.conversations} conversations, ${r.since_last_retrain.preference_pairs} of ${r.thresholds.preference_pairs} preference pairs.</p>`
      + (r.last_request ? `<p>Last retrain: ${esc(r.last_request.time)}, the ${esc(r.last_request.job)} job for ${esc(r.last_request.partition)} (${esc(r.last_request.tags["hominem/reason"] || "")}): `
        + (r.last_run ? `run <b>${esc(r.last_run.run_id.slice(0, 8))}</b> ${esc(r.last_run.status.toLowerCase())}` : "its run not started yet") + "</p>" : "");
    status(h.day ? `RHI ${num(h.rhi)} on ${h.day}` : "no health index yet");
  },
};

// Two different versions compared; with one built (a first day) or the same one picked twice, a line saying so.
async function compareIfTwo(o) {
  const kind = $("#compare-kind").value, list = o[kind] || [], a = $("#compare-a").value, b = $("#compare-b").value;
  const what = kind === "adapters" ? "adapter" : "reward model";
  if (list.length < 2 || a === b) {
    if (charts["chart-compare"]) { charts["chart-compare"].chart.destroy(); delete charts["chart-compare"]; }
    $("#chart-compare").innerHTML = "";
    $("#chart-compare").parentElement.hidden = true;
    $("#compare-scale").hidden = true;
    $("#compare-out").innerHTML = `<p class="muted" id="compare-none">${list.length < 2
      ? `Only ${list.length ? "one" : "no"} ${what} built so far: nothing earlier to compare it with. A later day's run builds another.`
      : `a and b are the same ${what}: pick two different ones.`}</p>`;
    status(list.length < 2 ? `nothing earlier to compare with (${list.length} ${what})` : "pick two different versions");
    return;
  }
  await runCompare();
}

async function runCompare() {
  const kind = $("#compare-kind").value, a = $("#compare-a").value, b = $("#compare-b").value;
  $("#chart-compare").parentElement.hidden = false;
  const c = await api(`/dashboard/api/compare?kind=${kind}&a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`);
  const ma = c.metrics[a] || {}, mb = c.metrics[b] || {};
  const keys = Object.keys({ ...ma, ...mb }).filter((k) => typeof (ma[k] ?? mb[k]) === "number" && (kind === "adapters" ? /win_rate|people_accuracy|memory|delta_|fixture_moved_right$/.test(k) : /^probe_/.test(k)));
  draw("chart-compare", keys.map((_, i) => i + 1), [{ label: a, values: keys.map((k) => ma[k] ?? null) }, { label: b, values: keys.map((k) => mb[k] ?? null) }],
    { kind: "linear", bars: true, categories: keys.map((k) => k.replace(/^probe_|^delta_/, "").replace(/_/g, " ")) });
  let html = `<table><thead><tr><th>figure</th><th>${esc(a)}</th><th>${esc(b)}</th><th>b - a</th></tr></thead><tbody>`
    + keys.map((k) => `<tr><td>${esc(k)}</td><td class="num">${num(ma[k])}</td><td class="num">${num(mb[k])}</td><td class="num">${num((mb[k] ?? 0) - (ma[k] ?? 0))}</td></tr>`).join("") + "</tbody></table>";
  if (c.tradeoffs) html += `<h3>Trade-offs</h3><table><thead><tr><th>scenario</th><th>written</th><th>a</th><th>b</th></tr></thead><tbody>`
    + c.tradeoffs.map((t) => `<tr><td>${esc(t.id)}</td><td>${esc(t.expected)}</td><td class="${t.a === t.expected ? "good" : "bad"}">${esc(t.a)} (${num(t.gap_a)})</td><td class="${t.b === t.expected ? "good" : "bad"}">${esc(t.b)} (${num(t.gap_b)})</td></tr>`).join("") + "</tbody></table>";
  if (c.counterfactuals) html += `<h3>Counterfactuals: the named dimension's move</h3><table><thead><tr><th>query</th><th>dimension</th><th>a</th><th>b</th></tr></thead><tbody>`
    + c.counterfactuals.map((t) => `<tr><td>${esc(t.id)}</td><td>${esc(t.dimension)} ${t.direction === "up" ? "↑" : "↓"}</td><td class="num">${num(t.moved_a)}</td><td class="num">${num(t.moved_b)}</td></tr>`).join("") + "</tbody></table>";
  if (c.replies) {
    const by = c.scored_by || {};
    const same = by[a] && by[a] === by[b];
    html += `<h3>Replies to the same prompts <span class="muted">(scalar by ${same ? esc(by[a]) : `each evaluation's own reward model: a by ${esc(by[a] || "?")}, b by ${esc(by[b] || "?")}, not one scale`})</span></h3>`
      + c.replies.map((r, i) => `<div class="card"><b>${esc(r.prompt)}</b><div class="pair"><div>${esc(r.adapter_response_a)}<p class="muted">scalar ${num(r.adapter_scalar_a)}</p></div><div>${esc(r.adapter_response_b)}<p class="muted">scalar ${num(r.adapter_scalar_b)}</p></div></div><p class="muted" id="served-${i}"></p></div>`).join("");
  }
  $("#compare-out").innerHTML = html;
  $("#compare-scale").hidden = true;
  status(`${a} against ${b}`);
  if (c.replies && c.replies.length) await scoreOnOneScale(a, b);
}

// Both adapters' replies scored by the served reward model, a few prompts a request (each drawn as it
// arrives): the mean change b - a of the scalar and of each dimension, with its standard error over the prompts.
async function scoreOnOneScale(a, b) {
  const rows = [];
  let s = { total: 1 };
  try {
    while (rows.length < s.total) {
      s = await api(`/dashboard/api/compare/score?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}&start=${rows.length}&count=2`);
      rows.push(...s.replies);
      showOneScale(s, rows);
      if (rows.length < s.total) status(`scoring both adapters' replies on the served reward model: ${rows.length} of ${s.total} prompts…`);
    }
  } catch (e) { status(`${a} against ${b} (not rescored on one reward model: ${e.message})`); return; }
  status(`${a} against ${b}, on one scale`);
}

function meanSe(values) {
  const n = values.length, mean = values.reduce((t, v) => t + v, 0) / n;
  return { mean, se: n > 1 ? Math.sqrt(values.reduce((t, v) => t + (v - mean) ** 2, 0) / (n - 1) / n) : null };
}

function showOneScale(s, rows) {
  $("#compare-scale").hidden = false;
  $("#compare-scale-by").textContent = `(both adapters' replies scored by the served reward model ${s.reward_model || ""}: mean change b - a over ${rows.length} of ${s.total} prompts)`;
  const keys = ["scalar", ...s.dimensions];
  const stats = Object.fromEntries(keys.map((k) => [k, meanSe(rows.map((r) => (k === "scalar" ? r.scalar_b - r.scalar_a : r.delta[k])))]));
  draw("chart-compare-delta", keys.map((_, i) => i + 1), [
    { label: "b - a", values: keys.map((k) => stats[k].mean) },
    { label: "± 1 standard error", values: keys.map((k) => stats[k].se), colour: "#adb5bd" },
  ], { kind: "linear", bars: true, categories: keys.map((k) => k.replace(/_/g, " ")) });
  const wins = rows.filter((r) => r.scalar_b - r.scalar_a > TIE).length;
  $("#compare-scale-note").innerHTML = `b's reply scores higher on ${wins} of ${rows.length} prompts; scalar b - a ${num(stats.scalar.mean)} ± ${num(stats.scalar.se)}. `
    + s.dimensions.filter((k) => stats[k].se !== null && Math.abs(stats[k].mean) > Math.max(TIE, 2 * stats[k].se)).map((k) => `<b>${esc(k)}</b> ${stats[k].mean > 0 ? "rose" : "fell"} beyond two standard errors`).join("; ");
  rows.forEach((r, i) => { const el = document.getElementById(`served-${i}`); if (el) el.textContent = `served reward model: a ${num(r.scalar_a)}, b ${num(r.scalar_b)}, P(b preferred) ${num(r.p_b)}`; });
}

function showProbe(p) {
  const dims = p.dimensions;
  draw("chart-probe", dims.map((_, i) => i + 1), p.replies.map((r, i) => ({ label: `reply ${i + 1} (scalar ${num(r.scalar)})`, values: dims.map((d) => r.vector[d]) })),
    { kind: "linear", bars: true, categories: dims.map((d) => d.replace(/_/g, " ")), yRange: [-1, 1] });
  $("#probe-out").innerHTML = p.p_first.map((v, j) => `<p>P(reply 1 preferred over reply ${j + 2}) = ${num(v)}</p>`).join("")
    + p.replies.map((_, i) => `<div class="card" id="attribution-${i}"></div>`).join("") + '<div class="card" id="rewrites"></div>';
}

function showAttribution(i, a) {
  const top = Math.max(1e-9, ...a.attribution.map((s) => Math.abs(s.scalar)));
  let at = 0, text = "";
  for (const s of a.attribution) {
    text += esc(a.reply.slice(at, s.start));
    const alpha = Math.min(1, Math.abs(s.scalar) / top).toFixed(2);
    text += `<span class="span" style="background:${s.scalar > 0 ? `rgba(47,158,68,${alpha})` : `rgba(224,49,49,${alpha})`}" title="scalar ${s.scalar.toFixed(4)}">${esc(s.text)}</span>`;
    at = s.end;
  }
  $(`#attribution-${i}`).innerHTML = `<h3>Reply ${i + 1}: attribution of the scalar <span class="muted">(occlusion, ${a.words} words a span: green raises it, red lowers it)</span></h3><p class="attribution">${text}${esc(a.reply.slice(at))}</p>`;
}

function showRewrites(r) {
  $("#rewrites").innerHTML = `<h3>Counterfactuals of reply 1 <span class="muted">(meaning-preserving rewrites: the scores should barely move)</span></h3><table><thead><tr><th>change</th><th>scalar moved</th><th>largest dimension move</th><th>what it read</th></tr></thead><tbody>`
    + r.counterfactuals.map((c) => { const [d, v] = Object.entries(c.moved).sort((x, y) => Math.abs(y[1]) - Math.abs(x[1]))[0];
      return `<tr><td>${esc(c.change)}</td><td class="num">${num(c.scalar_moved)}</td><td>${esc(d)} ${num(v)}</td><td class="muted">${esc(c.reply)}</td></tr>`; }).join("") + "</tbody></table>";
}

async function show() {
  const name = (location.hash || "#timeline").slice(1);
  const view = views[name] ? name : "timeline";
  document.querySelectorAll(".view").forEach((v) => { v.hidden = v.id !== `view-${view}`; });
  document.querySelectorAll("#tabs a").forEach((a) => a.classList.toggle("active", a.getAttribute("href") === `#${view}`));
  status("loading…");
  try { await views[view](); document.body.dataset.ready = view; } catch (e) { status(e.message, true); document.body.dataset.ready = "error"; }
}

window.addEventListener("hashchange", show);
window.addEventListener("DOMContentLoaded", () => {
  const token = $("#token");
  token.value = localStorage.getItem("hominem-token") || "";
  token.onchange = () => { localStorage.setItem("hominem-token", token.value.trim()); show(); };
  if (typeof uPlot === "undefined") { status("the chart library is not installed: run `make install` (scripts/vendor_js.py)", true); return; }
  show();
});

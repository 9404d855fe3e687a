// A run's page: fed by the run's event stream, resumed after every cut at the last seq it
// drew, so each record is applied exactly once, in order, whichever server answers.
"use strict";

const RUN_ID = document.body.dataset.runId;
const PAGE_BASE = "/runs/" + encodeURIComponent(RUN_ID);
const IMAGES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
const TURN_TEXT = 20000;

const W = 168, H = 48, GAP_X = 18, GAP_Y = 36, PAD = 12;
// What the run's records say: the page's live state holds one, and the history slider
// replays the records up to a seq into a fresh one (history.js).
function runState() {
  return {
    lastSeq: -1, seqs: [], nodes: new Map(), order: [], status: "connecting", agent: "",
    limits: null, finished: false, input: undefined, result: undefined, reason: "", parent: "",
    forkedFrom: null, waiting: [],
    waits: new Map(),  // key -> {key, nodeId, data, deadline, sleep, done, answer}
  };
}

const state = Object.assign(runState(), {
  retryMs: 1000, tokens: new Map(), connects: 0, stopped: "", live: 0, children: new Map(),
  selected: "", childrenAt: 0,
  records: [],  // every record applied, in seq order: what the history slider replays
  view: null,  // the run's view as the API gives it: its status word, budget and wall time
});
window.tetherState = state;  // read by the browser test; handy in the console too

function node(st, id, kind, parents) {
  let n = st.nodes.get(id);
  if (!n) {
    n = { id, kind, parents: parents || [], status: "pending", wallMs: 0, tokens: 0 };
    st.nodes.set(id, n);
    st.order.push(id);
  }
  return n;
}

function spawn(st, specs) {
  for (const s of specs || []) {
    node(st, s.node_id, s.kind, s.parent_ids);
    if (s.wait && !st.waits.has(s.wait.key)) {
      st.waits.set(s.wait.key, { key: s.wait.key, nodeId: s.node_id, data: s.wait.data,
        deadline: s.wait.deadline_us, sleep: s.wait.sleep, done: false, answer: "" });
    }
  }
}

// Apply one record to `st`; false if it was applied before (a stream may overlap a reconnect).
function applyRecord(r, st) {
  if (r.seq <= st.lastSeq) return false;
  st.lastSeq = r.seq;
  st.seqs.push(r.seq);
  if (r.status && !r.node_id) st.status = r.status;
  switch (r.body) {
    case "run_started":
      st.agent = r.agent; st.limits = r.limits; st.input = r.input;
      st.parent = r.parent_run_id || "";
      st.forkedFrom = r.forked_from || null;
      spawn(st, r.spawned);
      break;
    case "node_completed": {
      const n = node(st, r.node_id, r.kind, r.parent_ids);
      Object.assign(n, { status: "completed", wallMs: r.used.wall_ms, attempt: r.attempt,
                         tokens: r.used.tokens_in + r.used.tokens_out, used: r.used,
                         startedUs: r.started_at_us, finishedUs: r.finished_at_us,
                         output: r.output, blobs: r.blobs, error: undefined });
      spawn(st, r.spawned);
      if (r.event && st.waits.has(r.event.key)) {
        const w = st.waits.get(r.event.key);
        w.done = true;
        w.answer = r.event.timed_out ? "timed out" : "answered";
      }
      break;
    }
    case "node_failed": {
      const n = node(st, r.node_id, r.kind);
      n.attempt = r.attempt;
      if (n.status !== "completed") { n.status = "failed"; n.error = r.error; }
      break;
    }
    case "step_recorded": {
      // A journaled step of a running node: listed under the node.
      const n = node(st, r.node_id);
      n.steps = (n.steps || []).concat([r.step.name]);
      break;
    }
    case "run_waiting":
      st.waiting = r.keys || [];
      break;
    case "run_resumed":
      if (r.limits) st.limits = r.limits;
      st.reason = "";
      break;
    case "run_paused":
    case "run_finished":
      st.reason = r.reason || "";
      if (r.body === "run_finished") st.result = r.result;
      for (const n of st.nodes.values()) if (n.status === "running") n.status = "pending";
      break;
  }
  if (r.body === "run_finished") st.finished = true;
  return true;
}

function applyLive(kind, e) {
  const n = state.nodes.get(e.node_id);
  if (kind === "node_started" && n && n.status !== "completed") n.status = "running";
  if (kind === "token" && typeof e.text === "string") {
    // One entry per node: an LLM agent's model turn is one node, so this groups by turn.
    state.tokens.set(e.node_id, ((state.tokens.get(e.node_id) || "") + e.text).slice(-TURN_TEXT));
  }
}

// -- values ---------------------------------------------------------------------------

function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) if (k !== null && k !== undefined) e.append(k);
  return e;
}

function size(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1 << 20) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / (1 << 20)).toFixed(1)} MiB`;
}

function blobView(b) {
  // Read through the page's own path, where its session cookie reaches.
  const url = `${PAGE_BASE}/blobs/${encodeURIComponent(b.sha256)}`;
  const media = (b.media_type || "").split(";")[0].trim().toLowerCase();
  const what = `${media || "bytes"}, ${size(b.size)}, sha256 ${b.sha256.slice(0, 12)}`;
  const link = h("a", { href: url, download: b.sha256.slice(0, 16) }, `download (${what})`);
  if (IMAGES.has(media)) {
    return h("figure", { class: "blob" }, h("img", { src: url, alt: `attached image: ${what}` }),
             h("figcaption", {}, link));
  }
  return h("p", { class: "blob" }, link);
}

function valueView(v) {
  if (v && typeof v === "object" && v.$blob) return blobView(v.$blob);
  if (typeof v === "string") return h("pre", {}, v);
  // A chat message (recorded whole, or slim: without its role): its text first, as text.
  if (v && typeof v === "object" && typeof v.content === "string") {
    return h("div", {}, h("pre", {}, v.content), h("details", {}, h("summary", {}, "as JSON"),
             h("pre", {}, JSON.stringify(v, null, 2))));
  }
  return h("pre", {}, v === undefined ? "" : JSON.stringify(v, null, 2));
}

// -- drawing --------------------------------------------------------------------------

function depthOf(v, id, memo) {
  if (memo.has(id)) return memo.get(id);
  memo.set(id, 0);
  const n = v.nodes.get(id);
  let d = 0;
  for (const p of (n ? n.parents : [])) if (v.nodes.has(p)) d = Math.max(d, depthOf(v, p, memo) + 1);
  memo.set(id, d);
  return d;
}

function el(name, attrs, text) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function drawGraph(v) {
  const memo = new Map(), rows = [], pos = new Map();
  for (const id of v.order) {
    const d = depthOf(v, id, memo);
    (rows[d] = rows[d] || []).push(id);
  }
  rows.forEach((row, d) => row.forEach((id, i) => pos.set(id, {
    x: PAD + i * (W + GAP_X), y: PAD + d * (H + GAP_Y) })));
  const svg = document.getElementById("graph");
  const width = PAD * 2 + Math.max(1, ...rows.map((r) => r.length)) * (W + GAP_X);
  svg.setAttribute("width", width);
  svg.setAttribute("height", PAD * 2 + rows.length * (H + GAP_Y));
  const focused = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.nodeId : undefined;
  svg.replaceChildren();
  for (const id of v.order) {
    const n = v.nodes.get(id), to = pos.get(id);
    for (const p of n.parents) {
      const from = pos.get(p);
      if (!from) continue;
      const x1 = from.x + W / 2, y1 = from.y + H, x2 = to.x + W / 2, y2 = to.y;
      svg.append(el("path", { class: "edge",
        d: `M${x1},${y1} C${x1},${y1 + GAP_Y / 2} ${x2},${y2 - GAP_Y / 2} ${x2},${y2}` }));
    }
  }
  for (const id of v.order) {
    const n = v.nodes.get(id), p = pos.get(id);
    const child = state.children.has(id) ? " · sub-agent" : "";
    const g = el("g", { class: `node ${n.status}${id === state.selected ? " selected" : ""}`,
                        "data-node-id": id, "data-status": n.status, tabindex: "0",
                        role: "button", "aria-pressed": String(id === state.selected),
                        "aria-label": `${n.kind} node ${id.slice(0, 8)}: ${n.status}${child}`,
                        transform: `translate(${p.x},${p.y})` });
    g.append(el("rect", { width: W, height: H }));
    g.append(el("text", { x: 8, y: 17 }, `${n.kind} · ${n.status}`));
    const steps = n.steps ? ` · ${n.steps.length} steps` : "";
    const facts = (n.status === "completed" ? `${n.wallMs} ms · ${n.tokens} tok${steps}`
      : (n.steps ? `${n.steps.length} steps · ${n.steps[n.steps.length - 1]}` : id.slice(0, 16))) +
      (child ? " · ↗ run" : "");
    g.append(el("text", { x: 8, y: 35 }, facts));
    const listed = n.steps ? "\nsteps:\n  " + n.steps.join("\n  ") : "";
    g.append(el("title", {}, `${id}\n${n.kind}: ${n.status}${n.error ? "\n" + n.error.message : ""}${listed}`));
    svg.append(g);
  }
  if (focused) {
    const again = svg.querySelector(`g[data-node-id="${CSS.escape(focused)}"]`);
    if (again) again.focus();
  }
}

function bar(label, used, limit, fmt) {
  // Built as nodes, widths set through CSSOM: the page's CSP refuses inline style markup.
  const frac = limit ? Math.min(1, used / limit) : 0;
  const name = document.createElement("span");
  name.textContent = label;
  const outer = document.createElement("div");
  outer.className = "bar" + (limit && used >= limit ? " over" : "");
  outer.setAttribute("role", "img");
  outer.setAttribute("aria-label", `${label}: ${Math.round(frac * 100)}% of the limit`);
  const inner = document.createElement("div");
  inner.style.width = `${(frac * 100).toFixed(1)}%`;
  outer.append(inner);
  const value = document.createElement("span");
  value.textContent = `${fmt(used)}${limit ? " / " + fmt(limit) : " (no limit)"}`;
  return [name, outer, value];
}

// The budget bars draw the API's numbers (GET /v1/runs/{id}, read as the page's /view),
// which are `tether show`'s: the wall time is the time the run spent running, not its age
// (waits, pauses and a fork's source after the fork point do not count). `view` is the
// run's as it is, or as it was at the history slider's seq; until it comes the bars wait.
function drawBudget(view) {
  const box = document.getElementById("budget");
  box.setAttribute("aria-busy", String(!view));
  if (!view) return;
  const lim = view.budget.limits, u = view.budget.used, int = (x) => String(Math.round(x));
  box.dataset.records = String(view.records);  // the seq count the numbers are for
  box.dataset.wallMs = String(u.wall_ms);
  box.replaceChildren(
    ...bar("nodes", u.nodes, lim.max_nodes, int),
    ...bar("tokens", u.tokens_in + u.tokens_out, lim.max_tokens, int),
    ...bar("cost", u.cost, lim.max_cost, Tether.cost),
    ...bar("wall", u.wall_ms / 1000, lim.max_wall_ms / 1000, (x) => x.toFixed(1) + " s"));
}

// -- the API's view of the run --------------------------------------------------------

const views = { busy: false, again: false, lastAt: 0, timer: 0, past: new Map(), pastBusy: false };
const VIEW_EVERY_MS = 1000, PAST_VIEWS = 200;

async function getView(query) {
  const r = await fetch(`${PAGE_BASE}/view${query}`, { credentials: "same-origin" });
  return r.ok ? r.json() : null;
}

// The run as it is: asked again after records arrive, at most once a second, and always
// once after the last record the page drew, so the numbers end on the run's last ones.
async function wantView() {
  if (views.busy) { views.again = true; return; }
  const wait = views.lastAt + VIEW_EVERY_MS - Date.now();
  if (wait > 0) {
    if (!views.timer) views.timer = setTimeout(() => { views.timer = 0; wantView(); }, wait);
    return;
  }
  views.busy = true;
  views.lastAt = Date.now();
  try {
    const v = await getView("");
    if (v) { state.view = v; draw(); }
  } catch (e) {
    // the stream's own reconnect tells the reader the server is away; asked again then
  } finally {
    views.busy = false;
    if (views.again) { views.again = false; wantView(); }
  }
}

// The run as it was at `seq` (the history slider's): asked once and kept (a refusal too,
// as null: the bars then wait, and the page does not ask again); the latest seq wins.
function pastView(seq) {
  if (views.past.has(seq)) return views.past.get(seq);
  views.wanted = seq;
  if (!views.pastBusy) {
    views.pastBusy = true;
    getView(`?at=${seq}`).catch(() => null).then((v) => {
      if (views.past.size >= PAST_VIEWS) views.past.delete(views.past.keys().next().value);
      views.past.set(seq, v);
    }).finally(() => {
      views.pastBusy = false;
      if (views.wanted !== seq && !views.past.has(views.wanted)) pastView(views.wanted);
      draw();
    });
  }
  return null;
}

// Answers go to the JSON API with the API token in a header (typed here, or the tab's
// sign-in): the page's session cookie only ever reads, so a page alone cannot answer.
async function answer(w, payload, out) {
  const token = document.getElementById("token").value.trim() || Tether.token();
  if (!token) { out.textContent = "enter the API token first"; return; }
  out.textContent = "sending…";
  try {
    const r = await fetch(
      `/v1/runs/${encodeURIComponent(RUN_ID)}/signals/${encodeURIComponent(w.key)}`,
      { method: "POST", credentials: "omit", body: JSON.stringify(payload),
        headers: { "Authorization": `Bearer ${token}`, "Content-Type": "application/json" } });
    const body = await r.json().catch(() => ({}));
    out.textContent = r.ok ? `recorded (${r.status})`
      : `refused (${r.status}): ${(body.error && body.error.message) || ""}`;
  } catch (e) {
    out.textContent = `not sent: ${e}`;
  }
}

function button(label, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.addEventListener("click", onClick);
  return b;
}

function drawWaits() {
  const open = [...state.waits.values()].filter((w) => !w.done && !state.finished);
  const box = document.getElementById("waits");
  box.hidden = open.length === 0;
  const list = document.getElementById("wait-list");
  const shown = new Set([...list.children].map((d) => d.dataset.key));
  for (const d of [...list.children]) {
    if (!open.some((w) => w.key === d.dataset.key)) d.remove();
  }
  for (const w of open) {
    if (shown.has(w.key)) continue;  // keep what a person is typing
    const until = w.deadline ? ` (times out ${new Date(w.deadline / 1000).toLocaleString()})` : "";
    const out = h("span", { class: "answer", role: "status" });
    const d = h("div", { class: "wait", "data-key": w.key },
      h("strong", {}, `${w.sleep ? "sleep" : "wait"} ${w.key}${until}`),
      h("pre", {}, JSON.stringify(w.data, null, 2)));
    if (!w.sleep) {
      const raw = h("textarea", { rows: "2", placeholder: "or any JSON payload",
                                  "aria-label": `a JSON payload for ${w.key}` });
      d.append(
        button("Approve", () => answer(w, { approve: true }, out)),
        button("Reject", () => answer(w, { approve: false, reason: "rejected on the run page" }, out)),
        raw,
        button("Send JSON", () => {
          let payload;
          try { payload = JSON.parse(raw.value); } catch (e) { out.textContent = `not JSON: ${e}`; return; }
          answer(w, payload, out);
        }),
        out);
    }
    list.append(d);
  }
}

function drawTokens() {
  const box = document.getElementById("tokens");
  if (!state.tokens.size) return;
  let turn = 0;
  box.replaceChildren(...[...state.tokens].map(([id, text]) => {
    const n = state.nodes.get(id);
    turn += 1;
    const title = `turn ${turn} · ${n ? n.kind : "node"} ${id.slice(0, 8)}` +
      (n && n.status === "completed" ? ` · ${n.tokens} tokens` : " · streaming");
    return h("article", { class: "turn", "data-node-id": id }, h("h3", {}, title), h("p", {}, text));
  }));
}

function drawIo(v) {
  const input = document.getElementById("input");
  if (state.input !== undefined && !input.childElementCount) input.append(valueView(state.input));
  const title = document.getElementById("outcome-title");
  const box = document.getElementById("outcome");
  box.className = v.status;
  if (v.status === "succeeded") {
    title.textContent = "answer";
    box.replaceChildren(valueView(v.result));
  } else if (v.status === "failed" || v.status === "cancelled") {
    title.textContent = v.status === "failed" ? "error" : "cancelled";
    box.replaceChildren(h("pre", { class: "error" }, v.reason || v.status));
  } else if (v.status === "waiting") {
    title.textContent = "waiting";
    box.replaceChildren(h("p", {}, `parked until an event arrives for: ${(v.waiting || []).join(", ")}`),
      h("p", { class: "muted" }, "Nothing runs meanwhile. Answer below, or with tether signal RUN_ID KEY."));
  } else if (v.status === "paused") {
    title.textContent = "paused";
    box.replaceChildren(h("p", {}, `paused: ${v.reason || "no reason given"}`),
      h("p", { class: "muted" }, "Resume it (with a larger budget, if that is what stopped it)."));
  } else {  // queued or running (at that seq, for the history slider)
    title.textContent = "answer";
    box.replaceChildren(h("p", { class: "muted" }, "not finished yet"));
  }
  const parent = document.getElementById("parent");
  if (state.parent && !parent.childElementCount) {
    parent.append(" · sub-agent run of ",
      h("a", { href: "/runs/" + encodeURIComponent(state.parent) }, state.parent));
  }
  const origin = document.getElementById("origin");
  if (state.forkedFrom && !origin.childElementCount) {
    const src = state.forkedFrom.run_id;
    origin.append(" · forked from ", h("a", { href: "/runs/" + encodeURIComponent(src) }, src),
      ` at seq ${state.forkedFrom.seq}`);
  }
}

function drawPanel(v) {
  const panel = document.getElementById("panel");
  const n = v.nodes.get(state.selected);
  if (!n) { panel.hidden = true; return; }
  panel.hidden = false;
  const facts = h("dl", {});
  const fact = (k, v) => { if (v !== undefined && v !== "") facts.append(h("dt", {}, k), h("dd", {}, String(v))); };
  fact("node", n.id);
  fact("kind", n.kind);
  fact("status", n.status);
  fact("attempt", n.attempt);
  if (n.startedUs) fact("started", new Date(n.startedUs / 1000).toISOString());
  if (n.finishedUs) fact("finished", new Date(n.finishedUs / 1000).toISOString());
  if (n.used) {
    fact("wall", `${n.used.wall_ms} ms`);
    fact("tokens", `${n.used.tokens_in} in · ${n.used.tokens_out} out`);
    fact("model calls", n.used.model_calls);
    fact("cost", Tether.cost(n.used.cost));
  }
  const parts = [h("h2", {}, `${n.kind} node`), facts];
  for (const child of state.children.get(n.id) || []) {
    parts.push(h("p", {}, "sub-agent run: ",
      h("a", { href: child.page, class: "child-run" }, child.run_id), ` (${child.status})`));
  }
  if (n.error) parts.push(h("h3", {}, "error"), h("pre", { class: "error" }, `${n.error.type}: ${n.error.message}`));
  if (n.status === "completed") parts.push(h("h3", {}, "output"), valueView(n.output));
  if (n.blobs && n.blobs.length) {
    parts.push(h("h3", {}, "attached"), ...n.blobs.map(blobView));
  }
  if (n.status !== "completed" && !n.error) parts.push(h("p", { class: "muted" }, "no output yet"));
  panel.replaceChildren(...parts);
}

function drawChildren() {
  const all = [...state.children.values()].flat();
  document.getElementById("children-box").hidden = all.length === 0;
  document.getElementById("children").replaceChildren(...all.map((c) => h("li", {},
    h("a", { href: c.page, class: "child-run" }, c.run_id), ` ${c.agent} · ${c.status}`)));
}

function drawActions() {
  const live = ["queued", "running", "paused", "waiting"].includes(state.status);
  document.getElementById("cancel").disabled = !live;
  document.getElementById("resume").disabled = state.status !== "paused";
}

let pending = false;
function draw() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    document.getElementById("run-id").textContent = RUN_ID;
    // The API's word for where the run stands, as `tether runs` and `tether show` say it
    // (the records alone cannot tell a queued run or an orphaned one from a running one).
    const word = state.view ? state.view.state : "connecting";
    const status = document.getElementById("status");
    status.textContent = word;
    status.className = "badge " + word;
    document.getElementById("agent").textContent = state.agent;
    document.getElementById("records").textContent = `${state.seqs.length} records`;
    document.getElementById("reason").textContent = state.stopped || state.reason || "";
    const v = shown();  // the run as it is, or as it was at the history slider's seq
    drawIo(v);
    drawWaits();
    drawHistory();
    drawBudget(v === state ? state.view : pastView(past.at));
    drawGraph(v);
    drawPanel(v);
    drawChildren();
    drawTokens();
    drawActions();
  });
  fetchChildren();
}

function select(id) {
  state.selected = state.selected === id ? "" : id;
  draw();
}

const graph = document.getElementById("graph");
graph.addEventListener("click", (e) => {
  const g = e.target.closest("g.node");
  if (g) select(g.dataset.nodeId);
});
graph.addEventListener("keydown", (e) => {
  const g = e.target.closest("g.node");
  if (g && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); select(g.dataset.nodeId); }
});

// -- sub-agent runs -------------------------------------------------------------------

let childrenBusy = false;
async function fetchChildren() {
  // At most every 1.5 s, and once more after the end: a sub-agent run's row appears
  // when its node starts, before any record of this run says so.
  const now = Date.now();
  if (childrenBusy || (now - state.childrenAt < 1500 && !state.finished)) return;
  if (state.finished && state.childrenAt > 0 && state.childrenDone) return;
  childrenBusy = true;
  state.childrenAt = now;
  try {
    const r = await fetch(`${PAGE_BASE}/children`, { credentials: "same-origin" });
    if (r.ok) {
      const byNode = new Map();
      for (const c of (await r.json()).children) {
        if (!byNode.has(c.node_id)) byNode.set(c.node_id, []);
        byNode.get(c.node_id).push(c);
      }
      state.children = byNode;
      if (state.finished) state.childrenDone = true;
      draw();
    }
  } catch (e) {
    // the stream's own reconnect tells the reader the server is away
  } finally {
    childrenBusy = false;
  }
}

// -- cancel and resume ----------------------------------------------------------------

function say(text) { document.getElementById("action-note").textContent = text; }

async function withToken(action) {
  // Changing a run takes the API token (a cookie never does): the tab's, or ask for it.
  if (Tether.token()) { await action(); return; }
  const check = async (t) => (await fetch(`/v1/runs/${encodeURIComponent(RUN_ID)}`,
    { headers: { Authorization: "Bearer " + t } })).status;
  Tether.signIn(document.getElementById("signin"), check, () => action(),
                "Cancelling, resuming, forking or exporting a run takes the API token.");
}

async function post(path, body) {
  const r = await Tether.api(`/v1/runs/${encodeURIComponent(RUN_ID)}/${path}`, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: body === undefined ? "" : JSON.stringify(body),
  });
  const answer = await r.json().catch(() => ({}));
  if (r.status === 401) { Tether.forget(); say("The API token was not accepted; sign in again."); return null; }
  if (!r.ok) { say((answer.error && answer.error.message) || `the server answered ${r.status}`); return null; }
  say(`${path}: the run is ${answer.status}`);
  return answer;
}

document.getElementById("cancel").addEventListener("click", () => withToken(async () => {
  say("cancelling…");
  await post("cancel");
}));

// Export: GET /v1/runs/{id}/export with the tab's token (a link cannot send it), saved
// as RUN_ID.tlog through a blob URL; `tether import` loads the file.
document.getElementById("export").addEventListener("click", () => withToken(async () => {
  say("exporting…");
  const r = await Tether.api(`/v1/runs/${encodeURIComponent(RUN_ID)}/export`);
  if (r.status === 401) { Tether.forget(); say("The API token was not accepted; sign in again."); return; }
  if (!r.ok) {
    const answer = await r.json().catch(() => ({}));
    say((answer.error && answer.error.message) || `the server answered ${r.status}`);
    return;
  }
  const file = await r.blob();
  const url = URL.createObjectURL(file);
  const link = h("a", { href: url, download: `${RUN_ID}.tlog`, hidden: "" });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);  // the download has its bytes by then
  say(`exported ${RUN_ID}.tlog (${size(file.size)})`);
}));

document.getElementById("resume").addEventListener("click", () => {
  const form = document.getElementById("resume-form");
  const lim = state.limits || {};
  document.getElementById("b-nodes").value = lim.max_nodes || 0;
  document.getElementById("b-tokens").value = lim.max_tokens || 0;
  document.getElementById("b-cost").value = lim.max_cost || 0;
  document.getElementById("b-wall").value = (lim.max_wall_ms || 0) / 1000;
  form.hidden = !form.hidden;
  document.getElementById("resume").setAttribute("aria-expanded", String(!form.hidden));
  if (!form.hidden) document.getElementById("b-nodes").focus();
});

document.getElementById("resume-form").addEventListener("submit", (e) => {
  e.preventDefault();
  // "+N" goes as it is (the server adds it to what the run used); a number replaces a limit.
  const limit = (id, whole) => {
    const raw = document.getElementById(id).value.trim();
    // Not a number at all: sent as typed, so the server's answer names what was wrong.
    if (raw.startsWith("+") || Number.isNaN(Number(raw))) return raw;
    const v = Number(raw || 0);
    return whole ? Math.round(v) : v;
  };
  const budget = { max_nodes: limit("b-nodes", true), max_tokens: limit("b-tokens", true),
                   max_cost: limit("b-cost"), max_wall_s: limit("b-wall") };
  withToken(async () => {
    say("resuming…");
    if (!await post("resume", { budget })) return;  // refused: the form stays, as typed
    document.getElementById("resume-form").hidden = true;
    document.getElementById("resume").setAttribute("aria-expanded", "false");
  });
});

// -- the stream -----------------------------------------------------------------------

function setLink(text) {
  const link = document.getElementById("link");
  link.textContent = text;
  link.className = "badge " + text;
}

function stop(text, why) {
  state.stopped = why;
  setLink(text);
  document.getElementById("reason").textContent = why;
}

// The browser's EventSource gives up for good on any answer but a 200 stream (204 after
// the end, 404, 401) and hides the status; ask once with fetch what it was.
async function whyClosed(url) {
  const ctl = new AbortController();
  try {
    const r = await fetch(url, { signal: ctl.signal, credentials: "same-origin" });
    ctl.abort();
    return r.status;
  } catch (e) {
    return 0;  // unreachable: retry
  }
}

function connect() {
  if (state.finished || state.stopped) return;
  state.connects += 1;
  const url = `${PAGE_BASE}/events?tokens=1&after=${state.lastSeq}`;
  const es = new EventSource(url);
  const again = (ms) => { es.close(); setLink("reconnecting"); setTimeout(connect, ms); };
  es.onopen = () => setLink("live");
  es.addEventListener("record", (m) => {
    const r = JSON.parse(m.data);
    // A durable record always comes with its seq as the SSE id; anything else is not one.
    if (m.lastEventId === "" || Number(m.lastEventId) !== r.seq) return;
    if (applyRecord(r, state)) { state.records.push(r); wantView(); }
    draw();
  });
  es.addEventListener("live", (m) => {
    const e = JSON.parse(m.data);
    state.live += 1;
    applyLive(e.type, e);
    draw();
  });
  es.addEventListener("end", () => {
    es.close(); state.finished = true; setLink("done"); wantView(); draw();
  });
  // The server ends every stream after its time limit; pick up where we are.
  es.addEventListener("reconnect", () => again(0));
  es.onerror = async () => {
    if (es.readyState !== EventSource.CLOSED) {
      // A cut or a server that is away: reconnect ourselves, from the last seq drawn.
      again(state.retryMs);
      return;
    }
    es.close();
    const status = await whyClosed(url);
    if (status === 204) { state.finished = true; setLink("done"); wantView(); draw(); }
    else if (status === 404) stop("unknown", `no such run: ${RUN_ID} is not on this server`);
    else if (status === 401) stop("expired", "this page's session expired: open the run's link again");
    else again(state.retryMs);
  };
}

draw();
wantView();
connect();

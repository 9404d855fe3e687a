// The live run page: fed by the run's event stream, resumed after every cut at the last
// seq it drew, so each record is applied exactly once, in order, whichever server answers.
"use strict";

const RUN_ID = document.body.dataset.runId;

const W = 168, H = 48, GAP_X = 18, GAP_Y = 36, PAD = 12;
const state = {
  lastSeq: -1, seqs: [], nodes: new Map(), order: [], status: "connecting", agent: "",
  limits: null, used: { nodes: 0, tokens: 0, cost: 0 }, firstAt: 0, lastAt: 0,
  finished: false, retryMs: 1000, tokens: new Map(), connects: 0, stopped: "", live: 0,
  waits: new Map(),  // key -> {key, nodeId, data, deadline, sleep, done, answer}
};
window.tetherState = state;  // read by the browser test; handy in the console too

function node(id, kind, parents) {
  let n = state.nodes.get(id);
  if (!n) {
    n = { id, kind, parents: parents || [], status: "pending", wallMs: 0, tokens: 0 };
    state.nodes.set(id, n);
    state.order.push(id);
  }
  return n;
}

function spawn(specs) {
  for (const s of specs || []) {
    node(s.node_id, s.kind, s.parent_ids);
    if (s.wait && !state.waits.has(s.wait.key)) {
      state.waits.set(s.wait.key, { key: s.wait.key, nodeId: s.node_id, data: s.wait.data,
        deadline: s.wait.deadline_us, sleep: s.wait.sleep, done: false, answer: "" });
    }
  }
}

function applyRecord(r) {
  if (r.seq <= state.lastSeq) return;  // already drawn: a stream may overlap a reconnect
  state.lastSeq = r.seq;
  state.seqs.push(r.seq);
  state.firstAt = state.firstAt || r.at_us;
  state.lastAt = r.at_us;
  if (r.status && !r.node_id) state.status = r.status;
  switch (r.body) {
    case "run_started":
      state.agent = r.agent; state.limits = r.limits; spawn(r.spawned); break;
    case "node_completed": {
      const n = node(r.node_id, r.kind, r.parent_ids);
      Object.assign(n, { status: "completed", wallMs: r.used.wall_ms,
                         tokens: r.used.tokens_in + r.used.tokens_out, cost: r.used.cost });
      state.used.nodes += 1;
      state.used.tokens += n.tokens;
      state.used.cost += r.used.cost;
      state.tokens.delete(r.node_id);
      spawn(r.spawned);
      if (r.event && state.waits.has(r.event.key)) {
        const w = state.waits.get(r.event.key);
        w.done = true;
        w.answer = r.event.timed_out ? "timed out" : "answered";
      }
      break;
    }
    case "node_failed": {
      const n = node(r.node_id, r.kind);
      if (n.status !== "completed") { n.status = "failed"; n.error = r.error.message; }
      break;
    }
    case "step_recorded": {
      // A journaled step of a running node: listed under the node, its usage counted.
      const n = node(r.node_id);
      n.steps = (n.steps || []).concat([r.step.name]);
      state.used.tokens += r.used.tokens_in + r.used.tokens_out;
      state.used.cost += r.used.cost;
      break;
    }
    case "run_resumed":
      if (r.limits) state.limits = r.limits;
      break;
    case "run_paused":
    case "run_finished":
      state.reason = r.reason || "";
      for (const n of state.nodes.values()) if (n.status === "running") n.status = "pending";
      break;
  }
  if (r.body === "run_finished") state.finished = true;
}

function applyLive(kind, e) {
  const n = state.nodes.get(e.node_id);
  if (kind === "node_started" && n && n.status !== "completed") n.status = "running";
  if (kind === "token") {
    state.tokens.set(e.node_id, ((state.tokens.get(e.node_id) || "") + e.text).slice(-400));
  }
}

// -- drawing ------------------------------------------------------------------------

function depthOf(id, memo) {
  if (memo.has(id)) return memo.get(id);
  memo.set(id, 0);
  const n = state.nodes.get(id);
  let d = 0;
  for (const p of (n ? n.parents : [])) if (state.nodes.has(p)) d = Math.max(d, depthOf(p, memo) + 1);
  memo.set(id, d);
  return d;
}

function el(name, attrs, text) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function drawGraph() {
  const memo = new Map(), rows = [], pos = new Map();
  for (const id of state.order) {
    const d = depthOf(id, memo);
    (rows[d] = rows[d] || []).push(id);
  }
  rows.forEach((row, d) => row.forEach((id, i) => pos.set(id, {
    x: PAD + i * (W + GAP_X), y: PAD + d * (H + GAP_Y) })));
  const svg = document.getElementById("graph");
  const width = PAD * 2 + Math.max(1, ...rows.map((r) => r.length)) * (W + GAP_X);
  svg.setAttribute("width", width);
  svg.setAttribute("height", PAD * 2 + rows.length * (H + GAP_Y));
  svg.replaceChildren();
  for (const id of state.order) {
    const n = state.nodes.get(id), to = pos.get(id);
    for (const p of n.parents) {
      const from = pos.get(p);
      if (!from) continue;
      const x1 = from.x + W / 2, y1 = from.y + H, x2 = to.x + W / 2, y2 = to.y;
      svg.append(el("path", { class: "edge",
        d: `M${x1},${y1} C${x1},${y1 + GAP_Y / 2} ${x2},${y2 - GAP_Y / 2} ${x2},${y2}` }));
    }
  }
  for (const id of state.order) {
    const n = state.nodes.get(id), p = pos.get(id);
    const g = el("g", { class: `node ${n.status}`, "data-node-id": id, "data-status": n.status,
                        transform: `translate(${p.x},${p.y})` });
    g.append(el("rect", { width: W, height: H }));
    g.append(el("text", { x: 8, y: 17 }, `${n.kind} · ${n.status}`));
    const steps = n.steps ? ` · ${n.steps.length} steps` : "";
    const facts = n.status === "completed" ? `${n.wallMs} ms · ${n.tokens} tok${steps}`
      : (n.steps ? `${n.steps.length} steps · ${n.steps[n.steps.length - 1]}` : id.slice(0, 16));
    g.append(el("text", { x: 8, y: 35 }, facts));
    const listed = n.steps ? "\nsteps:\n  " + n.steps.join("\n  ") : "";
    g.append(el("title", {}, `${id}\n${n.kind}: ${n.status}${n.error ? "\n" + n.error : ""}${listed}`));
    svg.append(g);
  }
}

function bar(label, used, limit, fmt) {
  // Built as nodes, widths set through CSSOM: the page's CSP refuses inline style markup.
  const frac = limit ? Math.min(1, used / limit) : 0;
  const name = document.createElement("span");
  name.textContent = label;
  const outer = document.createElement("div");
  outer.className = "bar" + (limit && used >= limit ? " over" : "");
  const inner = document.createElement("div");
  inner.style.width = `${(frac * 100).toFixed(1)}%`;
  outer.append(inner);
  const value = document.createElement("span");
  value.textContent = `${fmt(used)}${limit ? " / " + fmt(limit) : " (no limit)"}`;
  return [name, outer, value];
}

function drawBudget() {
  const lim = state.limits || {}, u = state.used, int = (v) => String(Math.round(v));
  const wallS = state.firstAt ? (state.lastAt - state.firstAt) / 1e6 : 0;
  document.getElementById("budget").replaceChildren(
    ...bar("nodes", u.nodes, lim.max_nodes, int),
    ...bar("tokens", u.tokens, lim.max_tokens, int),
    ...bar("cost", u.cost, lim.max_cost, (v) => "$" + v.toFixed(4)),
    ...bar("wall", wallS, (lim.max_wall_ms || 0) / 1000, (v) => v.toFixed(1) + " s"));
}

// Answers go to the JSON API with the token typed on the page, in a header: the page's
// session cookie only ever reads (it never changes a run), so a page alone cannot answer.
async function answer(w, payload, out) {
  const token = document.getElementById("token").value.trim();
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
    const d = document.createElement("div");
    d.className = "wait";
    d.dataset.key = w.key;
    const title = document.createElement("strong");
    const until = w.deadline ? ` (times out ${new Date(w.deadline / 1000).toLocaleString()})` : "";
    title.textContent = `${w.sleep ? "sleep" : "wait"} ${w.key}${until}`;
    const data = document.createElement("pre");
    data.textContent = JSON.stringify(w.data, null, 2);
    const out = document.createElement("span");
    out.className = "answer";
    d.append(title, data);
    if (!w.sleep) {
      const raw = document.createElement("textarea");
      raw.rows = 2;
      raw.placeholder = "or any JSON payload";
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
  box.replaceChildren(...[...state.tokens].map(([id, text]) => {
    const d = document.createElement("div");
    d.textContent = `${id.slice(0, 8)}: ${text}`;
    return d;
  }));
}

let pending = false;
function draw() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    document.getElementById("run-id").textContent = RUN_ID;
    const status = document.getElementById("status");
    status.textContent = state.status;
    status.className = "badge " + state.status;
    document.getElementById("agent").textContent = state.agent;
    document.getElementById("records").textContent = `${state.seqs.length} records`;
    document.getElementById("reason").textContent = state.reason || "";
    drawBudget();
    drawWaits();
    drawGraph();
    drawTokens();
  });
}

// -- the stream ---------------------------------------------------------------------

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
  const url = `/runs/${encodeURIComponent(RUN_ID)}/events?tokens=1&after=${state.lastSeq}`;
  const es = new EventSource(url);
  const again = (ms) => { es.close(); setLink("reconnecting"); setTimeout(connect, ms); };
  es.onopen = () => setLink("live");
  es.addEventListener("record", (m) => {
    const r = JSON.parse(m.data);
    // A durable record always comes with its seq as the SSE id; anything else is not one.
    if (m.lastEventId === "" || Number(m.lastEventId) !== r.seq) return;
    applyRecord(r);
    draw();
  });
  es.addEventListener("live", (m) => {
    const e = JSON.parse(m.data);
    state.live += 1;
    applyLive(e.type, e);
    draw();
  });
  es.addEventListener("end", () => { es.close(); state.finished = true; setLink("done"); draw(); });
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
    if (status === 204) { state.finished = true; setLink("done"); draw(); }
    else if (status === 404) stop("unknown", `unknown run: no run ${RUN_ID} on this server`);
    else if (status === 401) stop("expired", "this page's session expired: open the run's link again");
    else again(state.retryMs);
  };
}

draw();
connect();

// The runs list: newest first, filtered by status, agent and run id, paged, refreshed
// every few seconds; each top-level run's sub-agent runs are nested under it.
"use strict";

const REFRESH_MS = 2000;
const params = new URLSearchParams(location.search);
// Runs per page: 25, or `?limit=` in the address (1-500, as the API takes).
const PAGE = Math.min(500, Math.max(1, Math.round(Number(params.get("limit"))) || 25));
const list = {
  rows: [], next: null, offset: Number(params.get("offset")) || 0, fetches: 0, error: "",
  status: params.get("status") || "", agent: params.get("agent") || "", q: params.get("q") || "",
  agents: new Set(), timer: 0, generation: 0,
};
window.tetherList = list;  // read by the browser test; handy in the console too

function query() {
  const p = new URLSearchParams({ usage: "1", limit: String(PAGE), offset: String(list.offset) });
  if (list.status) p.set("status", list.status);
  if (list.agent) p.set("agent", list.agent);
  // A search by id shows every matching run, sub-agent runs too, flat.
  if (list.q) p.set("q", list.q); else { p.set("top", "1"); p.set("children", "1"); }
  return p;
}

function keepInAddress() {
  const p = new URLSearchParams();
  for (const k of ["status", "agent", "q"]) if (list[k]) p.set(k, list[k]);
  if (list.offset) p.set("offset", String(list.offset));
  if (params.has("limit")) p.set("limit", String(PAGE));
  const s = p.toString();
  history.replaceState(null, "", s ? "?" + s : location.pathname);
}

async function load() {
  clearTimeout(list.timer);
  const generation = ++list.generation;
  let r;
  try {
    r = await Tether.api("/v1/runs?" + query().toString());
  } catch (e) {
    show("The server did not answer; retrying.");
    list.timer = setTimeout(load, REFRESH_MS * 2);
    return;
  }
  if (generation !== list.generation) return;  // the filters changed meanwhile
  if (r.status === 401) {
    document.getElementById("list").hidden = true;
    Tether.forget();
    const note = list.fetches ? "That token was not accepted." : "";
    Tether.signIn(document.getElementById("signin"), tryToken, () => load(), note);
    return;
  }
  if (!r.ok) {
    const body = await r.json().catch(() => ({}));
    show((body.error && body.error.message) || `the server answered ${r.status}`);
    return;
  }
  const body = await r.json();
  list.fetches += 1;
  list.rows = body.runs;
  list.next = body.next;
  document.getElementById("list").hidden = false;
  show("");
  draw();
  list.timer = setTimeout(load, REFRESH_MS);
}

async function tryToken(token) {
  const r = await fetch("/v1/runs?limit=1", { headers: { Authorization: "Bearer " + token } });
  return r.status;
}

function show(error) {
  list.error = error;
  document.getElementById("error").textContent = error;
}

function cell(text, cls) {
  const td = document.createElement("td");
  if (cls) td.className = cls;
  td.textContent = text;
  return td;
}

function row(run, depth) {
  const tr = document.createElement("tr");
  tr.dataset.runId = run.run_id;
  if (depth) { tr.className = "child"; tr.style.setProperty("--depth", String(depth)); }
  const name = document.createElement("td");
  const a = document.createElement("a");
  a.href = "/runs/" + encodeURIComponent(run.run_id);
  const code = document.createElement("code");
  code.textContent = depth ? run.run_id.slice(run.parent_run_id.length) : run.run_id;
  a.append(code);
  a.setAttribute("aria-label", `run ${run.run_id}`);
  name.append(a);
  const status = document.createElement("td");
  const badge = document.createElement("span");
  // The API's word for where the run stands, as `tether runs` says it: `orphaned` for a
  // running row whose owner's lease ran out (its owner died, a worker adopts it).
  const shown = run.state;
  badge.className = "badge " + shown;
  badge.textContent = shown;
  status.append(badge);
  const now = Date.now() / 1000;
  const started = new Date(run.created_at * 1000);
  const when = cell(Tether.seconds(Math.max(0, now - run.created_at)) + " ago");
  when.title = started.toISOString();
  // What the run used, as the API read it off its log (`tether show`'s numbers): its wall
  // time is the time it spent running. A row past the API's usage reads has none: "–".
  const u = run.usage;
  const used = (f) => (u ? f(u) : "\u2013");
  tr.append(name, status, cell(run.agent), when,
    cell(used((x) => Tether.seconds(x.wall_ms / 1000)), "num"),
    cell(used((x) => Tether.int(x.nodes)), "num"), cell(used((x) => Tether.int(x.tokens)), "num"),
    cell(used((x) => Tether.cost(x.cost)), "num"));
  return tr;
}

function draw() {
  const body = document.querySelector("#runs tbody");
  const rows = [];
  for (const run of list.rows) {
    list.agents.add(run.agent);
    rows.push(row(run, 0));
    // Sub-agent runs come flat, each naming its parent: nest them in tree order.
    const kids = new Map();
    for (const c of run.children || []) {
      if (!kids.has(c.parent_run_id)) kids.set(c.parent_run_id, []);
      kids.get(c.parent_run_id).push(c);
    }
    const walk = (id, depth) => {
      for (const c of (kids.get(id) || []).sort((x, y) => x.created_at - y.created_at)) {
        rows.push(row(c, depth));
        walk(c.run_id, depth + 1);
      }
    };
    walk(run.run_id, 1);
  }
  body.replaceChildren(...rows);
  document.getElementById("empty").hidden = list.rows.length > 0;
  document.getElementById("agents").replaceChildren(...[...list.agents].sort().map((name) => {
    const o = document.createElement("option");
    o.value = name;
    return o;
  }));
  const first = list.rows.length ? list.offset + 1 : 0;
  document.getElementById("page").textContent =
    `${first}–${list.offset + list.rows.length}`;
  document.getElementById("count").textContent = `${list.rows.length} ${list.rows.length === 1 ? "run" : "runs"} shown` +
    (list.status || list.agent || list.q ? " (filtered)" : "") + "; updated live";
  document.getElementById("prev").disabled = list.offset === 0;
  document.getElementById("next").disabled = !list.next;
}

function changed() {
  list.status = document.getElementById("f-status").value;
  list.agent = document.getElementById("f-agent").value.trim();
  list.q = document.getElementById("f-q").value.trim();
  list.offset = 0;
  keepInAddress();
  load();
}

let typing = 0;
function soon() { clearTimeout(typing); typing = setTimeout(changed, 250); }

document.getElementById("f-status").value = list.status;
document.getElementById("f-agent").value = list.agent;
document.getElementById("f-q").value = list.q;
document.getElementById("f-status").addEventListener("change", changed);
document.getElementById("f-agent").addEventListener("input", soon);
document.getElementById("f-q").addEventListener("input", soon);
document.getElementById("filters").addEventListener("submit", (e) => { e.preventDefault(); changed(); });
document.getElementById("prev").addEventListener("click", () => {
  list.offset = Math.max(0, list.offset - PAGE); keepInAddress(); load();
});
document.getElementById("next").addEventListener("click", () => {
  list.offset += PAGE; keepInAddress(); load();
});
load();

// A run page's history (loaded before run.js, whose state and drawing it uses): a slider
// over the run's seqs that redraws the graph, budget and outputs as they were at that seq,
// by replaying the records up to it as the page applies them live, and "Fork from here",
// which forks the run at that seq and opens the fork's page.
"use strict";

const past = { at: null, view: null, viewAt: -1 };  // at null: the slider follows the run

function shown() {
  if (past.at === null || past.at >= state.lastSeq) return state;
  if (past.viewAt !== past.at) {
    const v = runState();
    for (const r of state.records) {
      if (r.seq > past.at) break;
      applyRecord(r, v);
    }
    past.view = v;
    past.viewAt = past.at;
  }
  return past.view;
}

function describe(r) {
  const what = r.node_id ? `${r.body} ${r.kind || ""} ${r.node_id.slice(0, 12)}` : r.body;
  return `${what} at ${new Date(r.at_us / 1000).toLocaleTimeString()}`;
}

// Why the run cannot be forked at record `r`, or "".
function noFork(r) {
  if (!r) return "no records yet";
  if (state.parent) return "a sub-agent run: fork its parent run";
  if (r.body === "run_finished") return "this is the run's end: fork at an earlier seq";
  return "";
}

function drawHistory() {
  const slider = document.getElementById("at");
  const last = Math.max(0, state.lastSeq);
  const at = past.at === null ? last : Math.min(past.at, last);
  slider.max = String(last);
  slider.value = String(at);
  slider.disabled = state.lastSeq < 1;
  const r = state.records[at];
  const said = r ? `seq ${at} of ${last}: ${describe(r)}` : "no records yet";
  slider.setAttribute("aria-valuetext", said);
  document.getElementById("at-text").textContent =
    (past.at === null ? "live · " : "as it was at ") + said;
  document.getElementById("at-live").disabled = past.at === null;
  const why = noFork(r);
  const fork = document.getElementById("fork");
  fork.disabled = why !== "";
  document.getElementById("fork-why").textContent = why;
  document.body.classList.toggle("past", past.at !== null);
}

function goTo(seq) {
  past.at = seq >= state.lastSeq ? null : Math.max(0, seq);
  draw();
}

document.getElementById("at").addEventListener("input", (e) => goTo(Number(e.target.value)));
document.getElementById("at-live").addEventListener("click", () => {
  goTo(state.lastSeq);
  document.getElementById("at").focus();
});

document.getElementById("fork").addEventListener("click", () => withToken(async () => {
  const seq = past.at === null ? state.lastSeq : past.at;
  say(`forking at seq ${seq}…`);
  const forked = await post("fork", { at_seq: seq });
  if (forked) location.assign(forked.urls.page);  // the tab's token opens the fork's page
}));

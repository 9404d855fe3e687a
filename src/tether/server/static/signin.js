// The 401 page of a run's page: try the tab's token (or one pasted here) on the page's
// address; a 200 sets the page's session cookie, and the page opens.
"use strict";

async function tryToken(token) {
  const r = await fetch(location.pathname, {
    headers: { Authorization: "Bearer " + token, Accept: "text/html" },
    credentials: "same-origin",
  });
  return r.status;
}

// The token was good but there is no such run: the page says that alone, as the page
// for an unknown run does (static/missing.html), with nothing left of the sign-in.
function missing() {
  const runId = decodeURIComponent(location.pathname.slice("/runs/".length));
  document.title = "tether: no such run";
  document.getElementById("page-title").textContent = "no such run";
  const code = document.createElement("code");
  code.textContent = runId;
  const p = document.createElement("p");
  p.append("There is no run ", code, " on this server. It may have been started on " +
    "another store, or its id was mistyped.");
  document.getElementById("first-note").textContent = "";
  document.getElementById("signin").replaceChildren(p);
}

function opened(status) {
  if (status === 404) { missing(); return; }
  location.replace(location.pathname);  // drops a ?token= that was not accepted
}

async function start() {
  const box = document.getElementById("signin");
  const stored = Tether.token();
  if (stored) {
    const title = document.getElementById("page-title");
    const asked = title.textContent;
    title.textContent = "opening with this tab's sign-in…";
    const status = await tryToken(stored).catch(() => 0);
    if (status !== 401 && status !== 0) { opened(status); return; }
    title.textContent = asked;
    Tether.forget();
  }
  Tether.signIn(box, tryToken, opened, "");
}

start();

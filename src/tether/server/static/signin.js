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

function opened(status) {
  if (status === 404) {
    const p = document.createElement("p");
    p.textContent = "no such run on this server";
    document.getElementById("signin").replaceChildren(p);
    return;
  }
  location.replace(location.pathname);  // drops a ?token= that was not accepted
}

async function start() {
  const box = document.getElementById("signin");
  const stored = Tether.token();
  if (stored) {
    const status = await tryToken(stored).catch(() => 0);
    if (status !== 401 && status !== 0) { opened(status); return; }
    Tether.forget();
  }
  Tether.signIn(box, tryToken, opened, "");
}

start();

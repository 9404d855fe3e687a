// Shared by every console page: the API token, kept for this browser tab only
// (sessionStorage), the sign-in form that asks for it, and a few formats.
"use strict";

const Tether = {
  token() { return sessionStorage.getItem("tether.token") || ""; },
  remember(token) { sessionStorage.setItem("tether.token", token); },
  forget() { sessionStorage.removeItem("tether.token"); },

  // A call to the JSON API with the tab's token (a cookie never authorizes the API).
  api(path, options) {
    const opts = Object.assign({ credentials: "same-origin" }, options || {});
    opts.headers = Object.assign({ Authorization: "Bearer " + Tether.token() }, opts.headers || {});
    return fetch(path, opts);
  },

  // The sign-in form, drawn into `box`. `check(token)` resolves to the HTTP status that
  // trying the token gives; on anything but 401 the token is kept and `done(status)` runs.
  signIn(box, check, done, note) {
    const form = document.createElement("form");
    form.className = "signin";
    form.setAttribute("aria-labelledby", "signin-title");
    const title = document.createElement("h2");
    title.id = "signin-title";
    title.textContent = "Sign in";
    const help = document.createElement("p");
    help.textContent = "Paste the server's API token (tether serve --token, or TETHER_API_TOKEN). " +
      "It is kept for this browser tab only.";
    const label = document.createElement("label");
    label.htmlFor = "signin-token";
    label.textContent = "API token ";
    const input = document.createElement("input");
    input.id = "signin-token";
    input.type = "password";
    input.autocomplete = "current-password";
    input.required = true;
    const button = document.createElement("button");
    button.type = "submit";
    button.textContent = "Sign in";
    const said = document.createElement("p");
    said.className = "note";
    said.id = "signin-note";
    said.setAttribute("role", "alert");
    said.textContent = note || "";
    form.append(title, help, label, input, document.createTextNode(" "), button, said);
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const token = input.value.trim();
      if (!token) return;
      button.disabled = true;
      let status = 0;
      try { status = await check(token); } catch (e) { status = 0; }
      button.disabled = false;
      if (status === 401 || status === 403) {
        said.textContent = "That token was not accepted; try again.";
        input.select();
        return;
      }
      if (status === 0) { said.textContent = "The server did not answer; try again."; return; }
      Tether.remember(token);
      box.replaceChildren();
      done(status);
    });
    box.replaceChildren(form);
    input.focus();
  },

  cost(v) { return "$" + (v || 0).toFixed(4); },
  int(v) { return Math.round(v || 0).toLocaleString("en-US"); },
  seconds(s) {
    if (s < 1) return `${Math.round(s * 1000)} ms`;
    if (s < 90) return `${s.toFixed(1)} s`;
    if (s < 5400) return `${Math.round(s / 60)} min`;
    if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
    return `${Math.round(s / 86400)} d`;
  },
};

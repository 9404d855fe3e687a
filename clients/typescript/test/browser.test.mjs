// The client in a real browser (Debian's headless Chromium, as the console's tests use): a
// test page served from 127.0.0.1 loads dist/ as ES modules and follows a run through a
// same-origin gateway that adds the API token (the page holds none) and cuts every event
// stream after 2 records. The page reports what it saw with a POST; the test waits on that.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { backend, CHAIN, chainInput, chainNodes, ROOT, startServer, TOKEN } from "./kit.mjs";

const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const DIST = join(ROOT, "clients/typescript/dist");

const PAGE = (input) => `<!doctype html><meta charset="utf-8"><title>tether-client</title>
<script type="module">
import { TetherApiError, TetherClient } from "/dist/index.js";
const report = (body) => fetch("/report", { method: "POST", body: JSON.stringify(body) });
try {
  const client = new TetherClient({ baseUrl: "" }); // this origin; the gateway adds the token
  const { run_id } = await client.start({ agent: ${JSON.stringify(CHAIN)}, input: ${JSON.stringify(input)} });
  const seqs = [], bodies = [], reasons = [];
  let live = 0, last = null;
  for await (const event of client.events(run_id, { tokens: true, onReconnect: (i) => reasons.push(i.reason) })) {
    if (event.kind === "record") { seqs.push(event.seq); bodies.push(event.data.body); last = event.data; }
    else live += 1;
  }
  let unknown = null;
  try { await client.get("no-such-run"); } catch (e) { unknown = [e instanceof TetherApiError, e.status, e.code]; }
  await report({ ok: true, run_id, seqs, bodies, live, reasons, status: last.status, unknown, agent: navigator.userAgent });
} catch (e) {
  await report({ ok: false, error: String(e && e.stack || e) });
}
</script>`;

/** The test page, dist/, and /v1 forwarded to tether serve with the token added; event
 * streams are cut after `cutAfter` records. Resolves `reported` with the page's report. */
async function gateway(target, input, cutAfter) {
  let resolveReport;
  const reported = new Promise((resolve) => (resolveReport = resolve));
  const stats = { streams: 0, cuts: 0 };
  const upstream = new URL(target);
  const server = http.createServer((req, res) => {
    if (req.url === "/") {
      res.writeHead(200, { "Content-Type": "text/html" }).end(PAGE(input));
    } else if (req.url.startsWith("/dist/") && /^\/dist\/[a-z]+\.js$/.test(req.url)) {
      res.writeHead(200, { "Content-Type": "text/javascript" }).end(readFileSync(join(DIST, req.url.slice(6))));
    } else if (req.url === "/report" && req.method === "POST") {
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        res.writeHead(204).end();
        resolveReport(JSON.parse(body));
      });
    } else if (req.url.startsWith("/v1/")) {
      const headers = { ...req.headers, host: upstream.host, authorization: `Bearer ${TOKEN}` };
      const forward = http.request({ host: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers }, (up) => {
        res.writeHead(up.statusCode, up.headers);
        const stream = /\/events(\?|$)/.test(req.url) && up.statusCode === 200;
        if (stream) stats.streams += 1;
        let seen = 0;
        let cut = false;
        up.on("data", (chunk) => {
          if (cut) return;
          if (stream) seen += chunk.toString("latin1").split("event: record").length - 1;
          if (!(stream && seen >= cutAfter)) {
            res.write(chunk);
            return;
          }
          cut = true;
          stats.cuts += 1;
          up.destroy();
          // Once the records are on their way, the browser's fetch sees the stream break.
          res.write(chunk, () => res.socket?.destroy());
        });
        up.on("end", () => res.end());
        up.on("error", () => res.socket?.destroy());
      });
      forward.on("error", () => res.socket?.destroy());
      req.pipe(forward);
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/`,
    reported,
    stats,
    close: () => new Promise((resolve) => { server.close(resolve); server.closeAllConnections(); }),
  };
}

test("in headless Chromium: a run followed through a gateway that cuts every stream", { skip: !existsSync(CHROMIUM) && `no ${CHROMIUM}` }, async (t) => {
  const b = backend("sqlite");
  const server = await startServer(b);
  const [n, width] = [6, 2];
  const site = await gateway(server.url, chainInput(n, width, 0.05), 2);
  const profile = mkdtempSync(join(tmpdir(), "tether-client-chromium-"));
  const browser = spawn(CHROMIUM, ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--no-first-run", "--no-default-browser-check", `--user-data-dir=${profile}`, site.url], { stdio: "ignore" });
  try {
    const report = await Promise.race([
      site.reported,
      new Promise((_, reject) => browser.once("exit", (code) => reject(new Error(`chromium exited ${code}`)))),
    ]);
    assert.ok(report.ok, report.error);
    assert.deepEqual(report.seqs, report.seqs.map((_, i) => i), "each record once, in order");
    assert.equal(report.status, "succeeded");
    assert.equal(report.bodies.filter((body) => body === "node_completed").length, chainNodes(n, width));
    assert.deepEqual(report.unknown, [true, 404, "unknown_run"]);
    assert.ok(site.stats.cuts >= 3, JSON.stringify(site.stats));
    t.diagnostic(`${report.agent.match(/(Headless)?Chrome\/[0-9.]+/)?.[0]}: ${report.seqs.length} records, ` +
      `${site.stats.cuts} cuts, reconnects ${report.reasons.length}, ${report.live} live events`);
  } finally {
    browser.kill();
    await site.close();
    await server.stop();
    b.cleanup();
    rmSync(profile, { recursive: true, force: true });
  }
});

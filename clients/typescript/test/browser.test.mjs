// The client in a real browser (Debian's headless Chromium, as the console's tests use): a
// test page served from 127.0.0.1 loads dist/ as ES modules and follows a run through a
// same-origin gateway that adds the API token (the page holds none) and cuts every event
// stream after 2 records. The page reports what it saw with a POST; the test waits on that.
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { backend, CHAIN, chainInput, chainNodes, CHROMIUM, gateway, inChromium, ROOT, startServer } from "./kit.mjs";

const DIST = join(ROOT, "clients/typescript/dist");
const distFiles = () =>
  Object.fromEntries(
    readdirSync(DIST)
      .filter((name) => name.endsWith(".js"))
      .map((name) => [`/dist/${name}`, ["text/javascript", readFileSync(join(DIST, name))]]),
  );

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

const skip = !existsSync(CHROMIUM) && `no ${CHROMIUM}`;

test("in headless Chromium: a run followed through a gateway that cuts every stream", { skip }, async (t) => {
  const b = backend("sqlite");
  const server = await startServer(b);
  const [n, width] = [6, 2];
  const site = await gateway(server.url, { "/": ["text/html", PAGE(chainInput(n, width, 0.05))], ...distFiles() }, { cutAfter: 2 });
  try {
    const report = await inChromium(site.url, site.reported);
    assert.ok(report.ok, report.error);
    assert.deepEqual(report.seqs, report.seqs.map((_, i) => i), "each record once, in order");
    assert.equal(report.status, "succeeded");
    assert.equal(report.bodies.filter((body) => body === "node_completed").length, chainNodes(n, width));
    assert.deepEqual(report.unknown, [true, 404, "unknown_run"]);
    assert.ok(site.stats.cuts >= 3, JSON.stringify(site.stats));
    t.diagnostic(`${report.agent.match(/(Headless)?Chrome\/[0-9.]+/)?.[0]}: ${report.seqs.length} records, ` +
      `${site.stats.cuts} cuts, reconnects ${report.reasons.length}, ${report.live} live events`);
  } finally {
    await site.close();
    await server.stop();
    b.cleanup();
  }
});

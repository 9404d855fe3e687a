// Events per second through the client against curl on the same stream: a finished run of
// many records (the test chain agent, no delays) served by a fresh `tether serve` on
// SQLite, read whole from seq -1, 5 times each, medians. `node scripts/throughput.mjs`
// after `npm run build`.
import { execFileSync } from "node:child_process";
import { TetherClient } from "../dist/index.js";
import { backend, CHAIN, chainInput, startServer, TOKEN } from "../test/kit.mjs";

const [n, width] = [Number(process.argv[3] ?? 250), 3];
const b = backend(process.argv[2] ?? "sqlite");
const server = await startServer(b, { args: ["--workers", "embedded"] });
try {
  const client = new TetherClient({ baseUrl: server.url, token: TOKEN });
  const { run_id } = await client.start({ agent: CHAIN, input: chainInput(n, width, 0) });
  let records = 0;
  for await (const event of client.events(run_id)) records = event.seq + 1; // to its end
  const url = `${server.url}/v1/runs/${run_id}/events`;
  const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const viaClient = [];
  const viaCurl = [];
  for (let i = 0; i < 5; i++) {
    let t = performance.now();
    let seen = 0;
    for await (const _ of client.events(run_id)) seen += 1;
    viaClient.push(seen / ((performance.now() - t) / 1000));
    t = performance.now();
    const out = execFileSync("curl", ["-sN", "-H", `Authorization: Bearer ${TOKEN}`, url], { maxBuffer: 1 << 28 });
    const curled = out.toString().split("\nevent: record\n").length - 1;
    viaCurl.push(curled / ((performance.now() - t) / 1000));
    if (seen !== records || curled !== records) throw new Error(`${seen} / ${curled} of ${records}`);
  }
  console.log(`${records} records (${b.kind}): client ${median(viaClient).toFixed(0)} events/s, curl ${median(viaCurl).toFixed(0)} events/s (medians of 5)`);
} finally {
  await server.stop();
  b.cleanup();
}

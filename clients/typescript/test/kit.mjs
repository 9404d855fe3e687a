// What the tests share: `tether serve` (and `tether worker`) subprocesses started from this
// checkout, a database per test (SQLite, or PostgreSQL at 127.0.0.1:5432), and a loopback
// proxy that cuts event streams. Readiness is always a handshake (a printed line), never
// a sleep.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const TOKEN = "test-token-0123456789"; // tether serve wants 16 characters or more
export const CHAIN = "tests.server.agents:chain";
export const ROOT = fileURLToPath(new URL("../../..", import.meta.url));
const PYTHON = process.env.PYTHON ?? "python3";
const PG_ADMIN = process.env.TETHER_TEST_POSTGRES_URL ?? "postgresql://postgres@127.0.0.1:5432/postgres";

/** The input of the test chain agent: n steps, `width` leaves between two, each `delay` s. */
export const chainInput = (n, width, delay) => ({ i: 0, n, width, delay });
/** How many nodes a chain run records. */
export const chainNodes = (n, width) => n + (n - 1) * width;

function childEnv() {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("TETHER_")));
  env.PYTHONPATH = [join(ROOT, "src"), ROOT].join(":");
  env.TETHER_DEMO = "1";
  return env;
}

/** A scratch directory and a database URL; `cleanup()` drops both. */
export function backend(kind) {
  const home = mkdtempSync(join(tmpdir(), "tether-client-test-"));
  if (kind === "sqlite") {
    return { kind, home, db: `sqlite:///${join(home, "tether.db")}`, cleanup: () => rmSync(home, { recursive: true, force: true }) };
  }
  const name = `tether_tsclient_${process.pid}_${Math.floor(Math.random() * 1e9)}`;
  pgAdmin(`CREATE DATABASE ${name}`);
  const url = new URL(PG_ADMIN);
  url.pathname = `/${name}`;
  return {
    kind,
    home,
    db: url.toString(),
    cleanup: () => {
      pgAdmin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      rmSync(home, { recursive: true, force: true });
    },
  };
}

function pgAdmin(statement) {
  const code = "import asyncio, sys, asyncpg\n" +
    "async def main():\n" +
    "    conn = await asyncpg.connect(sys.argv[1], timeout=10)\n" +
    "    try:\n        await conn.execute(sys.argv[2])\n" +
    "    finally:\n        await conn.close()\n" +
    "asyncio.run(main())\n";
  execFileSync(PYTHON, ["-c", code, PG_ADMIN, statement], { stdio: ["ignore", "ignore", "inherit"] });
}

/** Whether PostgreSQL answers at the test URL (the second backend runs only then). */
export function postgresUp() {
  try {
    pgAdmin("SELECT 1");
    return true;
  } catch {
    return false;
  }
}

/** A `tether` subprocess; resolves once it printed the line `ready` matches. */
function tether(home, args, ready) {
  const proc = spawn(PYTHON, ["-m", "tether", ...args], { cwd: home, env: childEnv(), stdio: ["ignore", "pipe", "pipe"] });
  const lines = [];
  const exited = new Promise((resolve) => proc.once("exit", (code, signal) => resolve(code ?? signal)));
  return new Promise((resolve, reject) => {
    let buffer = "";
    let found = false;
    const onData = (chunk) => {
      buffer += chunk.toString();
      let nl;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        lines.push(line);
        if (process.env.TETHER_TEST_VERBOSE) process.stderr.write(`[tether ${proc.pid}] ${line}\n`);
        const match = found ? null : ready(line);
        if (match) {
          found = true;
          resolve({ proc, lines, exited, ...match, stop: (sig = "SIGTERM") => stop(proc, exited, sig) });
        }
      }
    };
    proc.stdout.on("data", onData);
    proc.stderr.on("data", onData);
    exited.then((code) => {
      if (!found) reject(new Error(`tether ${args.join(" ")} exited ${code}:\n${lines.join("\n")}`));
    });
  });
}

async function stop(proc, exited, sig) {
  if (proc.exitCode === null && proc.signalCode === null) proc.kill(sig);
  return exited;
}

/** `tether serve` on 127.0.0.1 (a free port unless `port`); resolves with its `url`. */
export function startServer(b, { port = 0, args = [] } = {}) {
  const argv = ["--db", b.db, "--blobs", join(b.home, "blobs"), "serve", "--port", String(port),
    "--token", TOKEN, "--agent", CHAIN, "--agent", "demo", ...args];
  return tether(b.home, argv, (line) => {
    const m = /^tether serve: listening on (\S+)/.exec(line);
    return m ? { url: m[1], port: Number(new URL(m[1]).port) } : null;
  });
}

/** `tether worker`; resolves once it says it is ready. */
export function startWorker(b, args = []) {
  const argv = ["--db", b.db, "--blobs", join(b.home, "blobs"), "worker", ...args];
  return tether(b.home, argv, (line) => (line.startsWith("worker ") && line.includes(" ready on ") ? {} : null));
}

/**
 * A TCP proxy on 127.0.0.1 in front of `target` (or of each of several in turn) that cuts every connection once the
 * server has sent it `records` SSE records, or `ms` after it opened, whichever comes first
 * (a gateway with a short timeout, a replica going away). It cuts with a reset, mid-way
 * through whatever it was sending.
 */
export async function cuttingProxy(target, { records = 2, ms = 1000 } = {}) {
  // Several targets: each connection goes to the next (a load balancer over replicas).
  const targets = [target].flat().map((t) => new URL(t));
  const stats = { connections: 0, cuts: 0, records: 0, byTarget: targets.map(() => 0) };
  const sockets = new Set();
  const pattern = "event: record";
  const server = net.createServer((client) => {
    const which = stats.connections % targets.length;
    stats.connections += 1;
    stats.byTarget[which] += 1;
    const upstream = net.connect(Number(targets[which].port), targets[which].hostname);
    sockets.add(client).add(upstream);
    let seen = 0;
    let tail = "";
    let done = false;
    const cut = () => {
      if (done) return;
      done = true;
      stats.cuts += 1;
      client.resetAndDestroy();
      upstream.resetAndDestroy();
    };
    const timer = setTimeout(cut, ms);
    const close = () => {
      clearTimeout(timer);
      done = true;
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on("data", (data) => upstream.write(data));
    upstream.on("data", (data) => {
      if (done) return;
      // Count records in what the server sends; a pattern split across two reads is
      // found since the tail kept is shorter than the pattern.
      const text = tail + data.toString("latin1");
      for (let i = text.indexOf(pattern); i >= 0; i = text.indexOf(pattern, i + 1)) {
        seen += 1;
        stats.records += 1;
      }
      tail = text.slice(-(pattern.length - 1));
      client.write(data);
      if (seen >= records) {
        client.once("drain", cut);
        if (client.writableLength === 0) cut();
      }
    });
    for (const s of [client, upstream]) {
      s.on("error", () => {});
      s.on("close", close);
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    stats,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(resolve);
      }),
  };
}

/** Asserts `records` are seqs 0..n-1, each once, and returns figures about them. */
export function exactlyOnceInOrder(assert, records) {
  const seqs = records.map((r) => r.seq);
  const duplicates = seqs.length - new Set(seqs).size;
  let gaps = 0;
  for (let i = 1; i < seqs.length; i++) if (seqs[i] > seqs[i - 1] + 1) gaps += 1;
  if (seqs[0] !== 0) gaps += 1;
  assert.deepEqual(seqs, seqs.map((_, i) => i), "records are seqs 0..n-1 in order");
  const nodes = records.filter((r) => r.data.body === "node_completed").map((r) => r.data.node_id);
  assert.equal(nodes.length, new Set(nodes).size, "each node completed once");
  return { records: seqs.length, duplicates, gaps };
}

export const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";

/**
 * A site on 127.0.0.1 for a browser test: `files` (path -> [content type, body]) and a
 * same-origin gateway that forwards /v1/... to tether serve adding the API token (the page
 * holds none), cutting every event stream after `cutAfter` records. The page POSTs its
 * findings to /report: `reported` resolves with them.
 */
export async function gateway(target, files, { cutAfter = Infinity } = {}) {
  const http = await import("node:http");
  let resolveReport;
  const reported = new Promise((resolve) => (resolveReport = resolve));
  const stats = { streams: 0, cuts: 0 };
  const upstream = new URL(target);
  const server = http.createServer((req, res) => {
    const file = files[req.url];
    if (file && req.method === "GET") {
      res.writeHead(200, { "Content-Type": file[0] }).end(file[1]);
    } else if (req.url === "/report" && req.method === "POST") {
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        res.writeHead(204).end();
        resolveReport(JSON.parse(body));
      });
    } else if (req.url.startsWith("/v1/")) {
      const headers = { ...req.headers, host: upstream.host, authorization: `Bearer ${TOKEN}` };
      const options = { host: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers };
      const forward = http.request(options, (up) => {
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
    close: () =>
      new Promise((resolve) => {
        server.close(resolve);
        server.closeAllConnections();
      }),
  };
}

/** Headless Chromium on `url` until `until` settles (or it exits: an error); then closed. */
export async function inChromium(url, until) {
  const profile = mkdtempSync(join(tmpdir(), "tether-client-chromium-"));
  // Its own process group: closing it ends its helper processes (renderer, GPU) too.
  const browser = spawn(CHROMIUM, ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--no-first-run", "--no-default-browser-check", `--user-data-dir=${profile}`, url], { stdio: "ignore", detached: true });
  const exited = new Promise((resolve) => browser.once("exit", resolve));
  try {
    return await Promise.race([until, exited.then((code) => Promise.reject(new Error(`chromium exited ${code}`)))]);
  } finally {
    try {
      process.kill(-browser.pid, "SIGKILL");
    } catch {
      // gone already
    }
    await exited;
    // A helper may still be closing a file in the profile: rmSync retries a few times.
    rmSync(profile, { recursive: true, force: true, maxRetries: 20, retryDelay: 50 });
  }
}

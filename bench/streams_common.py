"""What the stream benchmarks share: a bench database, a `tether serve` process, records."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import tether
from bench.common import BENCH_DB, PG_ADMIN_URL, Settings, _admin
from tether.model.records import NodeCompleted, Record, encode, now_us

TOKEN = "bench-token-0123456789"
SRC = Path(tether.__file__).resolve().parent.parent


def settings(quick: bool) -> Settings:
    return Settings(quick=quick, workdir=Path("."), pg_admin_url=PG_ADMIN_URL)


async def fresh_db(s: Settings) -> str:
    await _admin(s, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
    await _admin(s, f"CREATE DATABASE {BENCH_DB}")
    return s.pg_url


def node_record(seq: int) -> bytes:
    """A small NodeCompleted record, as a model turn's would be (~100 bytes)."""
    nc = NodeCompleted(node_id=f"n{seq:06d}", kind="turn", attempt=1, finished_at_us=now_us())
    return encode(Record(at_us=now_us(), node_completed=nc))


@dataclass
class Served:
    proc: subprocess.Popen[str]
    url: str
    pid: int

    def rss_mib(self) -> float:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def serve(db: str, *args: str) -> Served:
    """`tether serve` on `db` in a subprocess; returns once it prints its URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(SRC.parent)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "--db", db, "serve", "--port", "0",
         "--token", TOKEN, *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("tether serve: listening on "):
            return Served(proc, line.split()[4], proc.pid)
    raise RuntimeError(f"tether serve exited {proc.wait()}")

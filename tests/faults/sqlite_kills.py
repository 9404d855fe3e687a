"""SIGKILL a SQLite writer mid-append, again and again; reopen and check the log each time.

`python -m tests.faults.sqlite_kills DB KILLS` prints one JSON line per kill. Each
writer is a fork of this process (tether is imported once, so a kill costs milliseconds,
not an interpreter start): it appends batches of 1-8 records of varying size to one run
through tether's SQLite store, in a tight loop, and reports each acknowledged seq on a
pipe. After a random number of acknowledgements it is SIGKILLed, mid-append, and the
database is reopened: the log must be a clean prefix (seqs 0..n-1, every record whole)
holding every acknowledged append, and SQLite's own integrity check must pass.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import sys

from tether.store import store_from_url

RUN = "killed"


def record(seq: int) -> bytes:
    """The bytes of record `seq` (40 to ~940 bytes), so a torn one is recognisable."""
    return (f"<{seq}>".encode() * 200)[: 40 + (seq * 37) % 900]


async def write_forever(url: str, out_fd: int, rng: random.Random) -> None:
    async with store_from_url(url) as store:
        seq = len(await store.log.read(RUN))
        while True:
            n = rng.randint(1, 8)
            await store.log.append(RUN, [(s, record(s)) for s in range(seq, seq + n)])
            seq += n
            os.write(out_fd, f"{seq}\n".encode())


async def reopen(url: str, path: str) -> tuple[int, str]:
    """How many records the reopened log holds, and what is wrong with it ('' if nothing)."""
    async with store_from_url(url) as store:
        rows = await store.log.read(RUN)
    for i, (seq, data) in enumerate(rows):
        if seq != i:
            return len(rows), f"seq {seq} at position {i}: a gap"
        if data != record(seq):
            return len(rows), f"seq {seq}: its bytes differ from what was appended"
    with sqlite3.connect(path) as conn:
        (verdict,) = conn.execute("PRAGMA integrity_check").fetchone()
    conn.close()
    return len(rows), "" if verdict == "ok" else f"integrity_check: {verdict}"


def writer(url: str, kill_no: int) -> tuple[int, int]:
    """Fork a writer; return (its pid, the read end of its acknowledgement pipe)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            asyncio.run(write_forever(url, w, random.Random(kill_no)))
        finally:
            os._exit(1)
    os.close(w)
    return pid, r


def main() -> None:
    path, kills = sys.argv[1], int(sys.argv[2])
    url = f"sqlite:///{path}"
    rng = random.Random(int(os.environ.get("TETHER_FAULTS_SEED", "7")))
    for kill_no in range(kills):
        pid, r = writer(url, kill_no)
        target, acked, buf = rng.randint(1, 30), 0, b""
        with os.fdopen(r, "rb", buffering=0) as pipe:
            seen = 0
            while seen < target:
                chunk = pipe.read(4096)
                if not chunk:
                    break  # the writer died on its own: reported below as a problem
                buf += chunk
                seen = buf.count(b"\n")
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            buf += pipe.read()
        lines = buf.split()
        acked = int(lines[-1]) if lines else 0
        records, problem = asyncio.run(reopen(url, path))
        if not os.WIFSIGNALED(status):
            problem = problem or f"the writer exited by itself ({status})"
        print(json.dumps({"kill": kill_no, "acked": acked, "records": records, "problem": problem}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()

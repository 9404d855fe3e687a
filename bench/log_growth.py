"""How the log grows with a long conversation: linearly in nodes, never with history.

A 520-turn conversation on SQLite plus a local blob directory. Every turn's output is
only its new 400-character message; a turn derives the history by walking its
ancestors (`ctx.ancestors()` + `ctx.output_of`), never re-storing it. 20 of the turns
also render a 1 MB file and attach it (`ctx.attach`), so its bytes go to the blob store
and the record keeps a ref. Prints log bytes at every 100 nodes, the per-node increment
of each window (flat = linear growth), blob bytes, and what re-storing the history in
every turn would have cost.

    PYTHONPATH=src python bench/log_growth.py [--turns 500] [--files 20]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from tether import Context, Node, NodeResult, Registry, Runtime, Spawn, store_from_url
from tether.blobs import LocalBlobStore
from tether.model.records import decode_log

MESSAGE_CHARS = 400
FILE_BYTES = 1_000_000

chat = Registry("bench.chat", entry="turn")


def message(i: int) -> dict[str, str]:
    """The one new message of turn i: 400 characters of content."""
    content = (f"turn {i}: " + "lorem ipsum dolor sit amet " * 20)[:MESSAGE_CHARS]
    return {"role": "user" if i % 2 == 0 else "assistant", "content": content}


@chat.node("turn")
async def turn(ctx: Context, node: Node) -> NodeResult:
    i, total, every = node.input["i"], node.input["total"], node.input["file_every"]
    # The history is the outputs of this turn's ancestors, read from the graph.
    history = [await ctx.output_of(a) for a in ctx.ancestors()]
    assert len(history) == i, (len(history), i)
    if every and i % every == every - 1:
        data = random.Random(i).randbytes(FILE_BYTES)
        await ctx.attach(data, "application/pdf")
    spawn = [Spawn("turn", {**node.input, "i": i + 1}, key="next")] if i + 1 < total else []
    return NodeResult(message(i), spawn=spawn, is_result=i + 1 == total)


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def main(turns: int, files: int) -> None:
    total = turns + files
    every = total // files if files else 0
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "tether.db"
        async with (
            store_from_url(f"sqlite:///{db}") as store,
            LocalBlobStore(Path(tmp) / "blobs") as blobs,
        ):
            t0 = time.perf_counter()
            outcome = await Runtime(store, blobs=blobs).start(
                chat, {"i": 0, "total": total, "file_every": every}, run_id="chat"
            )
            elapsed = time.perf_counter() - t0
            assert outcome.status.value == "succeeded", outcome.reason
            rows = await store.log.read_all("chat")
            records = decode_log("chat", rows)
            blob_bytes = dir_bytes(blobs.root)
        # Measured after close, when SQLite has checkpointed its WAL into the file.
        db_bytes = sum(p.stat().st_size for p in db.parent.glob("tether.db*"))
        report(rows, records, total, elapsed, db_bytes, blob_bytes)


def report(
    rows: list[bytes], records: Any, total: int, elapsed: float, db_bytes: int, blob_bytes: int
) -> None:
    cumulative: list[int] = []  # log bytes after the n-th node record
    running = 0
    nodes = attached = 0
    for row, record in zip(rows, records, strict=True):
        running += len(row)
        if record.WhichOneof("body") == "node_completed":
            nodes += 1
            attached += len(record.node_completed.blobs)
            cumulative.append(running)
    log_bytes = sum(map(len, rows))
    print(f"{nodes} nodes ({attached} with a 1 MB attachment) in {elapsed:.2f} s")
    print(f"log: {len(rows)} records, {log_bytes} bytes, {log_bytes / nodes:.0f} bytes/node")
    print(f"sqlite file: {db_bytes} bytes; blobs: {blob_bytes} bytes")
    print()
    print(f"{'nodes':>6} {'log bytes':>10} {'bytes/node in window':>22}")
    marks = [*range(100, total, 100), total]
    prev_n, prev_b = 0, 0
    increments = []
    for n in marks:
        b = cumulative[n - 1]
        inc = (b - prev_b) / (n - prev_n)
        increments.append(inc)
        print(f"{n:>6} {b:>10} {inc:>22.1f}")
        prev_n, prev_b = n, b
    spread = max(increments) / min(increments)
    print(f"\nper-node increment max/min across windows: {spread:.3f} (1.0 = exactly linear)")
    # Re-storing the history in each turn: turn i would hold i earlier messages.
    per_message = len(str(message(0)))
    quadratic = sum(i * per_message for i in range(total))
    print(
        f"re-storing history in every turn would add about {quadratic / 1e6:.1f} MB "
        f"({quadratic / log_bytes:.0f}x this log)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--files", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.files))

"""The SQLite append, inside a caller's transaction (the log's append and a run's finish)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from tether.store.judgement import AppendFacts, judge_append
from tether.store.queries import load_queries

Q = load_queries("sqlite")


def append_rows(
    conn: sqlite3.Connection, run_id: str, entries: Sequence[tuple[int, bytes]], epoch: int | None
) -> None:
    """Insert the records, fenced by `epoch` if given (and then each only if it follows the
    log's last record); raise (so the caller rolls back) what `judge_append` finds wrong."""
    inserted = 0
    for seq, record in entries:
        if epoch is None:
            cur = conn.execute(Q["append"], (run_id, seq, record))
        else:
            cur = conn.execute(Q["append_fenced"], (run_id, seq, record, epoch))
        inserted += cur.rowcount
    if inserted == len(entries):
        return
    # The slow path, only for retries, conflicts and fenced-off appends.
    stored: dict[int, bytes] = {}
    for seq, _ in entries:
        row = conn.execute(Q["record_at"], (run_id, seq)).fetchone()
        if row is not None:
            stored[seq] = bytes(row[0])
    current = last = None
    if epoch is not None:
        found = conn.execute(Q["run_epoch"], (run_id,)).fetchone()
        current = None if found is None else int(found[0])
        last = int(conn.execute(Q["last_seq"], (run_id,)).fetchone()[0])
    judge_append(run_id, entries, epoch, AppendFacts(inserted, stored, current, last))

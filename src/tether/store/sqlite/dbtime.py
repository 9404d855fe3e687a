"""The SQLite store's clock: SQLite's own `'now'`, read in the statement's transaction.

Leases (and the workers table) are set and judged by this clock, never by the Python
process's `time.time()` or `tether.foundation.clock`, so a process whose clock is moved
(a test's injected offset) judges them as every other process does. SQLite has no server:
its clock is the host's, as the SQLite library in each process reads it, the same for
every process on the host (a clock faked for one process, as libfaketime does, fakes this
one too). Millisecond resolution.
"""

from __future__ import annotations

import sqlite3

from tether.store.queries import load_queries

Q = load_queries("sqlite")


def db_now(conn: sqlite3.Connection) -> float:
    """The database's time, in seconds since the epoch."""
    now: float = conn.execute(Q["clock"]).fetchone()[0]
    return now

"""SQLite only: the schema file and the migrations agree; migrate_url works on a file; a
fork is read by its ranges."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tether.store import migrate_url
from tether.store.queries import load_migrations, load_queries, load_schema
from tether.store.sqlite.forks import fork_records

Q = load_queries("sqlite")


def _schema_of(path: Path) -> list[tuple[str, str, str, str]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master"
            " WHERE name NOT LIKE 'sqlite_%' AND tbl_name <> 'schema_migrations' ORDER BY name"
        ).fetchall()
    conn.close()
    return [(t, n, tbl, " ".join(sql.split())) for t, n, tbl, sql in rows]


async def test_schema_sql_equals_all_migrations(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated.db"
    names = [m.name for m in load_migrations("sqlite")]
    assert await migrate_url(f"sqlite:///{migrated}") == names
    assert await migrate_url(f"sqlite:///{migrated}") == []
    from_schema = tmp_path / "schema.db"
    with sqlite3.connect(from_schema) as conn:
        conn.executescript(load_schema("sqlite"))
    conn.close()
    assert _schema_of(from_schema), "schema.sql created no tables"
    assert _schema_of(from_schema) == _schema_of(migrated)


def test_invariant_9_a_fork_is_read_by_its_ranges_as_the_merged_query_reads_it(
    tmp_path: Path,
) -> None:
    # A fork's rows: its own (seq 0, what it appended) and the ranges it references, each
    # read in seq order and put in place; own rows inside a referenced range (a log no
    # writer leaves) are read by the merged query, as before.
    conn = sqlite3.connect(tmp_path / "forks.db", isolation_level=None)
    conn.executescript(load_schema("sqlite"))
    log = [("a", seq, f"a{seq}".encode()) for seq in range(12)]
    log += [("b", seq, f"b{seq}".encode()) for seq in range(6)]
    log += [("f", seq, f"f{seq}".encode()) for seq in (0, 4, 9, 10)]
    log += [("g", seq, f"g{seq}".encode()) for seq in (0, 3)]
    conn.executemany("INSERT INTO run_log (run_id, seq, record) VALUES (?, ?, ?)", log)
    conn.executemany(
        "INSERT INTO run_refs (run_id, from_seq, to_seq, source_run_id) VALUES (?, ?, ?, ?)",
        [("f", 1, 3, "a"), ("f", 5, 8, "b"), ("g", 1, 5, "a")],
    )
    want = b"f0 a1 a2 a3 f4 b5 f9 f10".split()  # b holds no seq 6..8
    assert fork_records(conn, "f") == want
    for run in ("f", "g", "a", "nobody"):
        merged = [r[0] for r in conn.execute(Q["read_all"], (run,)).fetchall()]
        assert fork_records(conn, run) == merged
    assert fork_records(conn, "nobody") == []
    assert not conn.in_transaction
    conn.close()

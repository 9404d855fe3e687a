"""Plans of the PostgreSQL statements whose shape is their speed.

The claim reads only the runs it may take: the runs running under live leases
and the parked runs not yet due are in none of the indexes it walks, however many there are
(before, every claim stepped over each run in flight first).

The claim is planned with statistics taken once the runs are in flight, as autovacuum's
analyze would take them, and with statistics taken before, when none was running: each
branch's index is the only one that serves it, so no estimate makes another look cheaper
(runs_held_idx, whose predicate was runs_lease_idx's, was walked for the orphaned branch
while statistics said no run was running). Its generic plan, which a prepared statement
may come to use, finds the runs it takes by their key too."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

import asyncpg

from tether.store import RunInfo, Status
from tether.store.forks import NewRun, Origin, Segment
from tether.store.postgres import PostgresStore
from tether.store.postgres.leases import claim_sql
from tether.store.queries import load_queries, load_schema

Q = load_queries("postgres", "queries.sql")
LQ = load_queries("postgres", "limits.sql")
SQ = load_queries("sqlite", "queries.sql")
IN_FLIGHT = 300
PARKED = 100
FINISHED = 20_000  # what a runs table mostly holds: a scan of it costs more than an index
FINISHED_RUNS = """
INSERT INTO runs (run_id, agent, status, created_at, updated_at)
SELECT 'f' || i, 'a', 'succeeded', i, i FROM generate_series(1, $1) AS i
"""
QUEUED = 5000
QUEUED_RUNS = """
INSERT INTO runs (run_id, agent, status, created_at, updated_at)
SELECT 'q' || i, 'a', 'queued', i, i FROM generate_series(1, $1) AS i
"""


def _node_types(plan: dict[str, Any]) -> list[str]:
    return [plan["Node Type"]] + [t for p in plan.get("Plans", []) for t in _node_types(p)]


def _seq_scanned(plan: dict[str, Any]) -> list[str]:
    """The tables the plan reads whole."""
    own = [plan["Relation Name"]] if plan["Node Type"] == "Seq Scan" else []
    return own + [t for p in plan.get("Plans", []) for t in _seq_scanned(p)]


def _filtered_rows_of_runs(plan: dict[str, Any]) -> int:
    """Rows of `runs` that a scan read and then threw away, over the whole plan."""
    own = plan.get("Rows Removed by Filter", 0) if plan.get("Relation Name") == "runs" else 0
    return int(own) + sum(_filtered_rows_of_runs(p) for p in plan.get("Plans", []))


async def _explained(store: PostgresStore, query: str, *args: object) -> dict[str, Any]:
    async with store._db.connection() as conn:  # type: ignore[attr-defined]
        raw = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}", *args)
    plan: dict[str, Any] = json.loads(raw)[0]["Plan"]
    return plan


async def _in_flight_and_parked(store: PostgresStore) -> int:
    """IN_FLIGHT runs running under live leases, PARKED parked an hour, one queued: its
    number."""
    total = IN_FLIGHT + PARKED + 1
    for i in range(total):
        await store.runs.create(RunInfo(f"r{i:04d}", "a", Status.QUEUED), b"0")
    claims = await store.leases.claim("w1", IN_FLIGHT + PARKED, 3600.0)
    assert len(claims) == IN_FLIGHT + PARKED
    for claim in claims[:PARKED]:  # parked until an hour from now
        parked = await store.leases.release(
            claim.run_id, claim.epoch, Status.WAITING, wake_at=time.time() + 3600
        )
        assert parked
    return total - 1


async def _finished_runs(store: PostgresStore, *, analyse: bool) -> None:
    """Empty tables (the claim tests share this module's database), then FINISHED runs."""
    async with store._db.connection() as conn:  # type: ignore[attr-defined]
        await conn.execute("TRUNCATE run_log, runs")
        await conn.execute(FINISHED_RUNS, FINISHED)
        if analyse:
            await conn.execute("ANALYZE runs")


async def _analyse(store: PostgresStore) -> None:
    async with store._db.connection() as conn:  # type: ignore[attr-defined]
        await conn.execute("ANALYZE runs")


async def test_a_claim_planned_on_statistics_of_an_idle_table_steps_over_no_run_in_flight(
    pg_store: PostgresStore,
) -> None:
    await _finished_runs(pg_store, analyse=True)  # nothing running yet
    last = await _in_flight_and_parked(pg_store)
    plan = await _explained(pg_store, claim_sql(1), "w2", 1, 60.0, [], None, None, [])
    assert _filtered_rows_of_runs(plan) == 0, json.dumps(plan, indent=1)
    run = await pg_store.runs.get(f"r{last:04d}")
    assert run is not None and run.owner == "w2"


async def test_the_claims_generic_plan_takes_its_runs_by_key(pg_store: PostgresStore) -> None:
    """A prepared statement's generic plan does not know how many runs it claims (it
    guesses a tenth of the queue): joined to them, the update hashed a scan of the whole
    runs table."""
    async with pg_store._db.connection() as conn:  # type: ignore[attr-defined]
        await conn.execute("TRUNCATE run_log, runs")
        await conn.execute(QUEUED_RUNS, QUEUED)
        await conn.execute("ANALYZE runs")
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        try:
            await conn.execute(
                "PREPARE generic_claim(text, int, float8, text[], text[], text[], text[]) AS "
                + claim_sql(1)
            )
            raw = await conn.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON) "
                "EXECUTE generic_claim('w2', 1, 60.0, '{}', NULL, NULL, '{}')"
            )
            await conn.execute("DEALLOCATE generic_claim")
        finally:
            await conn.execute("RESET plan_cache_mode")
    plan = json.loads(raw)[0]["Plan"]
    assert "runs" not in _seq_scanned(plan), json.dumps(plan, indent=1)
    assert _filtered_rows_of_runs(plan) == 0, json.dumps(plan, indent=1)
    run = await pg_store.runs.get("q1")
    assert run is not None and run.owner == "w2"  # the oldest: claimed


async def test_a_prepared_claim_is_planned_once(pg_database: str) -> None:
    """After its first five executions, PostgreSQL keeps a prepared statement's generic plan
    only if it costs no more than the custom ones. Costed for a tenth of the queue (the
    size a parameter), the claim's never did, and every claim was planned anew: 0.43 ms
    of a 0.84 ms claim with 5,000 queued."""
    conn = await asyncpg.connect(pg_database)
    try:
        await conn.execute("TRUNCATE run_log, runs")
        await conn.execute(QUEUED_RUNS, QUEUED)
        await conn.execute("ANALYZE runs")
        for size in (1, 3):
            claim = await conn.prepare(claim_sql(size))
            for _ in range(10):
                assert len(await claim.fetch("w", size, 60.0, [], None, None, [])) == size
            generic, custom = await conn.fetchrow(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement = $1",
                claim_sql(size),
            )
            assert generic >= 5 and custom <= 5, (size, generic, custom)
    finally:
        await conn.close()


async def test_the_ordered_claim_runs_its_generic_plan(pg_database: str) -> None:
    """claim_flow (keys, priorities or limits) is planned once per connection: PostgreSQL
    keeps custom plans for it by itself, and planning took 1.7-2.0 ms of a 5-8 ms claim."""
    store = PostgresStore(pg_database, min_size=1, max_size=1)  # every claim on one connection
    await store.open()
    try:
        async with store._db.connection() as conn:  # type: ignore[attr-defined]
            await conn.execute("TRUNCATE run_log, runs")
            await conn.execute(QUEUED_RUNS, 40)
            await conn.execute("UPDATE runs SET concurrency_key = 'k' || (created_at::int % 4)")
            await conn.execute("ANALYZE runs")
        for _ in range(8):
            assert len(await store.leases.claim("w", 1, 60.0)) == 1
        async with store._db.connection() as conn:  # type: ignore[attr-defined]
            generic, custom = await conn.fetchrow(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement = $1",
                LQ["claim_flow"],
            )
        assert (generic, custom) == (8, 0)
    finally:
        await store.close()


async def test_a_claim_steps_over_no_run_in_flight_nor_parked(pg_store: PostgresStore) -> None:
    await _finished_runs(pg_store, analyse=False)
    last = await _in_flight_and_parked(pg_store)
    await _analyse(pg_store)  # as autovacuum would, once the runs are in flight
    args = ("w2", 1, 60.0, [], None, None, [])
    plan = await _explained(pg_store, claim_sql(1), *args)
    assert _filtered_rows_of_runs(plan) == 0, json.dumps(plan, indent=1)
    run = await pg_store.runs.get(f"r{last:04d}")
    assert run is not None and run.owner == "w2"  # the one queued run: claimed
    stranded = await _explained(pg_store, Q["stranded"], ["b"], ["v1"], [], 10)
    assert _filtered_rows_of_runs(stranded) == 0, json.dumps(stranded, indent=1)


async def test_a_run_that_is_no_fork_is_read_whole_and_sorted_in_python(
    pg_store: PostgresStore,
) -> None:
    """Rehydration's read of a run that references no rows has no sort in the database,
    with statistics or without: rows of a node record's width (~230 bytes), 3,000 of them,
    made PostgreSQL scan and sort them (a bitmap scan, or a sequential one once analysed),
    which cost more than the scan. They come in their pages' order and are put in seq
    order in Python: here appended out of order, so the read must sort them. The same
    statement reads a fork (the next test; tests/test_fork_refs.py)."""
    rows = [(seq, b"%05d" % seq + b"x" * 225) for seq in range(3000)]
    await pg_store.runs.create(RunInfo("plain", "a", Status.QUEUED), rows[0][1])
    await pg_store.log.append("plain", rows[1000:])  # the pages hold seqs 1000.. first
    await pg_store.log.append("plain", rows[1:1000])
    for analysed in (False, True):
        if analysed:  # as autovacuum would
            async with pg_store._db.connection() as conn:  # type: ignore[attr-defined]
                await conn.execute("ANALYZE run_log; ANALYZE run_refs")
        types = _node_types(await _explained(pg_store, Q["read_all"], "plain"))
        assert not {"Sort", "Gather", "Gather Merge"} & set(types), (analysed, types)
        assert await pg_store.log.read_all("plain") == [row for _, row in rows]


async def test_a_fork_is_read_without_a_sort_or_parallel_workers(pg_store: PostgresStore) -> None:
    """A fork's rows (its own and the ranges it references) are read piece by piece, each a
    walk of run_log's key, and sorted by seq in Python: with statistics or without, no sort
    in the database (on disk past work_mem) and no parallel workers (3-7 ms to start, more
    than a whole 500-record load). A whole read is one statement for a fork and its
    source alike (`read_all`)."""
    rows = [(seq, b"s%d" % seq) for seq in range(2000)]
    await pg_store.runs.create(RunInfo("src", "a", Status.SUCCEEDED), rows[0][1])
    await pg_store.log.append("src", rows[1:])
    own = [(0, b"fork"), (1000, b"override"), (2000, b"after")]
    fork = NewRun(
        RunInfo("fk", "a", Status.QUEUED),
        own[0][1],
        Origin("src", 1999),
        [Segment(1, 999, "src"), Segment(1001, 1999, "src")],
        own[1:],
    )
    await pg_store.forks.create_runs([fork])
    expected = sorted({**dict(rows), **dict(own)}.items())
    for analysed in (False, True):
        if analysed:
            async with pg_store._db.connection() as conn:  # type: ignore[attr-defined]
                await conn.execute("ANALYZE run_log; ANALYZE run_refs")
        for after in (-1, 1500):
            types = _node_types(await _explained(pg_store, Q["read"], "fk", after))
            assert not {"Sort", "Gather", "Gather Merge"} & set(types), (analysed, types)
            assert await pg_store.log.read("fk", after_seq=after) == expected[after + 1 :]
        types = _node_types(await _explained(pg_store, Q["read_all"], "fk"))
        assert not {"Sort", "Gather", "Gather Merge"} & set(types), (analysed, types)
        assert await pg_store.log.read_all("fk") == [row for _, row in expected]
        assert await pg_store.log.read_all("src") == [row for _, row in rows]


async def test_a_fork_is_walked_by_its_ranges_when_run_log_holds_large_runs(
    pg_store: PostgresStore,
) -> None:
    """Once run_log holds a large run (here 50,000 records of 230 bytes, 12 MB: parallel
    scans become worth planning) and statistics say so, a small fork's read is still a
    nested walk of its ranges: flattened into the join, the walk was planned as a parallel
    nested loop (workers started for 500 rows: 5.9 ms instead of 0.47) or a hash join over
    every row of run_log. Both reads of a fork keep it a subquery."""
    big = [(seq, b"%06d" % seq + b"x" * 224) for seq in range(50_000)]
    await pg_store.runs.create(RunInfo("large-big", "a", Status.SUCCEEDED), big[0][1])
    await pg_store.log.append("large-big", big[1:])
    small = big[:500]
    await pg_store.runs.create(RunInfo("large-small", "a", Status.SUCCEEDED), small[0][1])
    await pg_store.log.append("large-small", small[1:])
    fork = NewRun(
        RunInfo("large-fk", "a", Status.QUEUED),
        b"fork",
        Origin("large-small", 499),
        [Segment(1, 499, "large-small")],
    )
    await pg_store.forks.create_runs([fork])
    async with pg_store._db.connection() as conn:  # type: ignore[attr-defined]
        await conn.execute("ANALYZE run_log; ANALYZE run_refs")
    for query, args in (
        (Q["read"], ("large-fk", -1)),
        (Q["read"], ("large-fk", 250)),
        (Q["read_all"], ("large-fk",)),
    ):
        types = _node_types(await _explained(pg_store, query, *args))
        assert not {"Gather", "Gather Merge", "Hash Join", "Sort"} & set(types), (args, types)
    assert await pg_store.log.read_all("large-fk") == [b"fork"] + [row for _, row in small[1:]]
    assert await pg_store.log.read("large-fk", after_seq=250) == small[251:]


def _claim_steps(conn: sqlite3.Connection) -> int:
    """SQLite virtual-machine steps of one claim of one run (rolled back)."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    args = {"owner": "w", "now": 1000.0, "ttl": 5.0, "limit": 1, "skip": "[]", "pinned": 0}
    conn.set_progress_handler(count, 1)
    try:
        claimed = conn.execute(SQ["claim"], {**args, "also": "[]", "serves": "[]"}).fetchall()
    finally:
        conn.set_progress_handler(None, 1)
        conn.rollback()
    assert len(claimed) == 1
    return steps


def test_a_sqlite_claim_costs_the_same_however_many_runs_are_in_flight() -> None:
    """The same on SQLite, counted in its virtual machine's steps (no statistics: SQLite's
    planner goes by the indexes' keys). Before, each claim sorted every queued, paused and
    running run."""
    conn = sqlite3.connect(":memory:", isolation_level="DEFERRED")
    conn.executescript(load_schema("sqlite"))
    insert = "INSERT INTO runs (run_id, agent, status, created_at, updated_at, lease_until,"
    insert += " wake_at) VALUES (?, 'a', ?, ?, ?, ?, ?)"
    conn.execute(insert, ("queued", "queued", 5000.0, 5000.0, None, None))
    conn.commit()
    alone = _claim_steps(conn)
    for i in range(IN_FLIGHT):  # running under leases that run out long after now
        conn.execute(insert, (f"r{i}", "running", float(i), float(i), 9000.0, None))
    for i in range(PARKED):  # parked until after now
        conn.execute(insert, (f"p{i}", "waiting", float(i), float(i), None, 9000.0))
    for i in range(PARKED):  # paused by their users
        conn.execute(insert, (f"u{i}", "paused", float(i), float(i), None, None))
    conn.commit()
    crowded = _claim_steps(conn)
    assert crowded <= alone + 50, (alone, crowded)

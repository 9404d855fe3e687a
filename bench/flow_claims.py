"""Flow control's claim (issue 16): claims per second with concurrency limits on and off,
against the plain SKIP LOCKED claim, on the same queue in the same run.

A queue of runs spread over 10 concurrency keys; 4 claimers take one run per claim until
half the queue is running, for each way of claiming:

- the plain claim: one `UPDATE ... FROM (SELECT ... ORDER BY created_at LIMIT 1 FOR UPDATE
  SKIP LOCKED)` (the floor of every line);
- `store.leases.claim` with no limit and no keys (the plain path plus flow's two probes;
  about 0.6x of the bare claim, as the claim before flow control measured: it also looks
  for due parked runs, drained and orphaned ones, and pins versions);
- with keys and priorities but no limit (the ordered claim: priorities, keys in turns);
- with a limit per key that never binds (the ordered claim, taking turns under the lock);
- the same over 200 keys (25 queued runs each at full size): a claim ranks the first few
  runs of every key (its size plus a margin), so its cost grows with the keys that have
  runs queued;
- SQLite's ordered claim with a limit per key, one claimer (claims hold the file's write
  lock), over 10 and 200 keys, against SQLite's plain claim of the same queue unkeyed.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time

from bench.common import Line, Settings, open_pg, open_sqlite, pg_pool
from tether.store import Store
from tether.store.limits import ConcurrencyLimit
from tether.store.sqlite import SqliteStore

AGENT = "bench.flow"
KEYS = 10
MANY_KEYS = 200
CLAIMERS = 4
PLAIN = """
UPDATE runs SET status = 'running', owner = $1, epoch = runs.epoch + 1,
       lease_until = extract(epoch FROM clock_timestamp()) + 60
FROM (SELECT run_id FROM runs WHERE parent_run_id IS NULL AND status = 'queued'
      ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED) AS p
WHERE runs.run_id = p.run_id
RETURNING runs.run_id
"""
QUEUE = """
INSERT INTO runs (run_id, agent, status, created_at, updated_at, concurrency_key, priority)
SELECT 'q' || i, $1, 'queued', i, i, CASE WHEN $2 THEN 'k' || (i % $3) ELSE '' END,
       CASE WHEN $2 THEN i % 3 ELSE 0 END
FROM generate_series(1, $4) AS i
"""


async def _queue(store: Store, n: int, keyed: bool, keys: int = KEYS) -> None:
    pool = pg_pool(store)
    await pool.execute("TRUNCATE runs, run_limits")
    await pool.execute(QUEUE, AGENT, keyed, keys, n)
    await pool.execute("ANALYZE runs")


SQLITE_QUEUE = """
INSERT INTO runs (run_id, agent, status, created_at, updated_at, concurrency_key, priority)
VALUES (?, ?, 'queued', ?, ?, ?, ?)
"""


async def _sqlite_rate(settings: Settings, queued: int, keys: int) -> float:
    """Claims/s of one claimer on SQLite, `queued` runs over `keys` keys (0: unkeyed, no
    limit: the plain claim), a limit per key that never binds."""
    store = await open_sqlite(settings, f"flow-{keys}")
    try:
        assert isinstance(store, SqliteStore)
        with sqlite3.connect(store.path) as conn:  # one transaction: not a commit a run
            conn.executemany(
                SQLITE_QUEUE,
                [
                    (f"q{i}", AGENT, i, i, f"k{i % keys}" if keys else "", i % 3 if keys else 0)
                    for i in range(queued)
                ],
            )
        conn.close()
        if keys:
            await store.limits.set(ConcurrencyLimit(AGENT, queued, each_key=True))
        claims = settings.size(50, 200)
        t0 = time.perf_counter()
        for _ in range(claims):
            assert await store.leases.claim("bench", 1, 60.0), "the queue ran dry"
        return claims / (time.perf_counter() - t0)
    finally:
        await store.close()


async def _rate(claims: int, claim_one: object) -> float:
    """Claims per second of CLAIMERS tasks taking `claims` runs in all, one per claim."""
    assert callable(claim_one)
    left = [claims]

    async def claimer(i: int) -> None:
        while left[0] > 0:
            left[0] -= 1
            got = await claim_one(f"bench-{i}")
            assert got, "the queue ran dry"

    t0 = time.perf_counter()
    await asyncio.gather(*(claimer(i) for i in range(CLAIMERS)))
    return claims / (time.perf_counter() - t0)


async def _measure(settings: Settings) -> list[Line]:
    queued = settings.size(1000, 5000)
    claims = queued // 2
    store = await open_pg(settings)
    pool = pg_pool(store)

    async def plain(owner: str) -> bool:
        return bool(await pool.fetch(PLAIN, owner))

    async def tether_claim(owner: str) -> bool:
        return bool(await store.leases.claim(owner, 1, 60.0))

    rates: dict[str, float] = {}
    try:
        for name, keyed, limited, claim in (
            ("plain", False, False, plain),
            ("off", False, False, tether_claim),
            ("keys", True, False, tether_claim),
            ("limits", True, True, tether_claim),
        ):
            await _queue(store, queued, keyed)
            if limited:  # a slot per key for every run: it never binds, it is only counted
                await store.limits.set(ConcurrencyLimit(AGENT, queued, each_key=True))
            rates[name] = await _rate(claims, claim)
        # Many keys: fewer claims (each ranks every key's first runs), the same queue size.
        await _queue(store, queued, True, MANY_KEYS)
        await store.limits.set(ConcurrencyLimit(AGENT, queued, each_key=True))
        rates["many"] = await _rate(settings.size(40, 200), tether_claim)
    finally:
        await store.close()
    sqlite_plain = await _sqlite_rate(settings, queued, 0)
    sqlite_keys = {keys: await _sqlite_rate(settings, queued, keys) for keys in (KEYS, MANY_KEYS)}
    floor = "the plain SKIP LOCKED claim"
    size = f"{queued:,} queued, {CLAIMERS} claimers"
    return [
        Line("flow_claims", f"claims/s, no limits, no keys ({size})", rates["off"],
             "claims/s", floor, rates["plain"], ">= 0.6x", rates["off"] >= 0.6 * rates["plain"]),
        Line("flow_claims", f"claims/s, keys and priorities, no limit ({size})", rates["keys"],
             "claims/s", floor, rates["plain"]),
        Line("flow_claims", f"claims/s, a limit per key ({size})", rates["limits"],
             "claims/s", floor, rates["plain"]),
        Line("flow_claims", f"claims/s, a limit per key, {MANY_KEYS} keys ({size})",
             rates["many"], "claims/s", floor, rates["plain"]),
    ] + [
        Line("flow_claims", f"SQLite claims/s, a limit per key, {keys} keys ({queued:,} queued)",
             rate, "claims/s", "SQLite's plain claim, same queue unkeyed", sqlite_plain)
        for keys, rate in sqlite_keys.items()
    ]  # fmt: skip


def run(settings: Settings) -> list[Line]:
    return asyncio.run(_measure(settings))

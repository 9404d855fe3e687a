"""Invariant 11 (a concurrency limit is never exceeded by a claim), with keys, limits,
priorities and fair turns in the claim, the same on every backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.clock import ManualClock
from tether.foundation import clock as tether_clock
from tether.foundation.errors import BadLimit
from tether.store import RunInfo, Status, Store
from tether.store.base import Serves
from tether.store.limits import ConcurrencyLimit


@pytest.fixture(autouse=True)
def clock() -> Iterator[ManualClock]:
    # Runs are created a second apart on this clock (their creation time orders claims).
    with tether_clock.use(ManualClock()) as manual:
        yield manual


async def add(store: Store, run_id: str, key: str | None = None, **kw: object) -> None:
    tether_clock.current().advance(1.0)  # type: ignore[attr-defined]
    kw.setdefault("agent", "a")
    info = RunInfo(run_id=run_id, status=Status.QUEUED, key=key, **kw)  # type: ignore[arg-type]
    await store.runs.create(info, b"0")


async def claimed(store: Store, n: int = 100, ttl: float = 30.0, **kw: object) -> list[str]:
    return [c.run_id for c in await store.leases.claim("w", n, ttl, **kw)]  # type: ignore[arg-type]


async def one_by_one(store: Store) -> list[str]:
    order = []
    while got := await claimed(store, 1):
        order += got
    return order


async def test_a_key_never_runs_more_than_its_limit_and_others_are_not_held_back(
    store: Store,
) -> None:
    await store.limits.set(ConcurrencyLimit("a", 2, key="A"))
    for i in range(5):
        await add(store, f"a{i}", "A")
    for i in range(2):
        await add(store, f"b{i}", "B")
    # The third A queued before the Bs: passed over, not waited for (no head-of-line block).
    assert sorted(await claimed(store)) == ["a0", "a1", "b0", "b1"]
    assert await claimed(store) == []
    info = await store.runs.get("a0")
    assert info is not None and info.key == "A" and info.priority == 0
    assert await store.limits.held("a") == {"A": 2, "B": 2}
    await add(store, "b2", "B")
    rows = [r for r in await store.runs.list() if r.status is Status.QUEUED]
    assert await store.limits.waiting(rows) == {
        "a2": "waiting: key A at its limit 2",
        "a3": "waiting: key A at its limit 2",
        "a4": "waiting: key A at its limit 2",
    }
    # A finished run frees its slot: the next A in line takes it.
    assert await store.leases.release("a0", 1, Status.SUCCEEDED)
    assert await claimed(store) == ["a2", "b2"]


async def test_a_slot_is_freed_when_its_lease_runs_out(store: Store) -> None:
    await store.limits.set(ConcurrencyLimit("a", 1, key="A"))
    await add(store, "a0", "A")
    await add(store, "a1", "A")
    # Leased for a negative time: its worker is as good as dead (PostgreSQL times leases).
    assert await claimed(store, ttl=-1.0) == ["a0"]
    # The orphaned run holds no slot and is first in line again: it is taken over.
    assert await claimed(store) == ["a0"]
    assert await claimed(store) == []


async def test_removing_a_limit_frees_the_runs_that_waited_at_once(store: Store) -> None:
    await store.limits.set(ConcurrencyLimit("a", 1, key="A"))
    for i in range(3):
        await add(store, f"a{i}", "A")
    assert await claimed(store) == ["a0"]
    assert await claimed(store) == []
    assert await store.limits.remove("a", "A")
    assert not await store.limits.remove("a", "A")
    assert await claimed(store) == ["a1", "a2"]


async def test_each_key_limits_every_key_and_a_key_of_its_own_wins(store: Store) -> None:
    await store.limits.set(ConcurrencyLimit("a", 1, each_key=True))
    await store.limits.set(ConcurrencyLimit("a", 3, key="big"))
    for key in ("x", "y", "big"):
        for i in range(4):
            await add(store, f"{key}{i}", key)
    await add(store, "nokey", None)  # a run without a key is not held by each_key
    got = await claimed(store)
    assert sorted(got) == ["big0", "big1", "big2", "nokey", "x0", "y0"]
    assert [lim.scope for lim in await store.limits.all()] == [
        "key big of agent a",
        "each key of agent a",
    ]


async def test_an_agent_limit_caps_all_of_its_runs_whatever_their_keys(store: Store) -> None:
    await store.limits.set(ConcurrencyLimit("a", 3))
    await store.limits.set(ConcurrencyLimit("a", 1, key="A"))
    for i in range(3):
        await add(store, f"a{i}", "A")
        await add(store, f"b{i}", "B")
        await add(store, f"o{i}", agent="other")
    got = await claimed(store)
    # A's second run is held by its key, so a B takes the agent's third slot.
    assert sorted(got) == ["a0", "b0", "b1", "o0", "o1", "o2"]
    [b2] = [r for r in await store.runs.list() if r.run_id == "b2"]
    assert await store.limits.waiting([b2]) == {"b2": "waiting: agent a at its limit 3"}


async def test_higher_priorities_first_then_keys_in_turns(store: Store) -> None:
    for i in range(6):
        await add(store, f"big{i}", "big")
    for i in range(2):
        await add(store, f"small{i}", "small")
    await add(store, "plain", None)
    await add(store, "urgent", "big", priority=5)
    assert await one_by_one(store) == [
        "urgent",  # the highest priority first; it holds a slot of key big, so:
        "small0",
        "plain",
        "big0",
        "small1",
        "big1",
        "big2",
        "big3",
        "big4",
        "big5",
    ]


async def test_the_claim_still_pins_runs_to_the_versions_a_worker_serves(store: Store) -> None:
    await store.limits.set(ConcurrencyLimit("a", 5, key="A"))
    await add(store, "old", "A", agent_version="v1")
    await add(store, "new", "A", agent_version="v2")
    await add(store, "skipped", "A", agent_version="v2")
    serves = Serves({"a": "v2"})
    assert await claimed(store, serves=serves, skip=["skipped"]) == ["new"]
    assert await claimed(store, serves=Serves({"a": "v1"})) == ["old"]


async def test_a_limit_given_in_code_is_a_default_a_stored_one_wins(store: Store) -> None:
    await store.limits.set(ConcurrencyLimit("a", 4, key="A"))
    await store.limits.set(ConcurrencyLimit("a", 9, key="A"), only_if_missing=True)
    await store.limits.set(ConcurrencyLimit("a", 2, key="B"), only_if_missing=True)
    got = {(lim.key, lim.max_running) for lim in await store.limits.all()}
    assert got == {("A", 4), ("B", 2)}
    await store.limits.set(ConcurrencyLimit("a", 6, key="A"))
    assert ConcurrencyLimit("a", 6, key="A") in await store.limits.all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_running": 0}, "max running must be 1 or more, not 0"),
        ({"max_running": -2}, "max running must be 1 or more, not -2"),
        ({"max_running": 1, "key": "k", "each_key": True}, "not both"),
        ({"max_running": 1, "key": ""}, "concurrency key ''"),
        ({"max_running": True}, "max running must be 1 or more"),
    ],
)
def test_a_bad_limit_is_refused_with_what_was_wrong(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(BadLimit, match=message):
        ConcurrencyLimit("a", **kwargs)  # type: ignore[arg-type]


async def test_keys_alternate_even_one_slot_at_a_time(store: Store) -> None:
    for i in range(4):
        await add(store, f"big{i}", "big")
    for i in range(2):
        await add(store, f"small{i}", "small")
    order = []
    while got := await store.leases.claim("w", 1, 30.0):
        order.append(got[0].run_id)
        # Finished before the next claim: no slot is held, the key served longest ago wins.
        assert await store.leases.release(got[0].run_id, got[0].epoch, Status.SUCCEEDED)
    assert order == ["big0", "small0", "big1", "small1", "big2", "big3"]


# The ordered claim ranks only the first (claim size + a margin) runnable runs of each
# (agent, key) (limits.sql/claim_flow; PostgreSQL's margin is 32, or 4 while limits exist,
# SQLite's none): a claim of 1 looks at 33 per pair at most. These queue more.
MANY = 40


async def test_a_key_with_many_queued_runs_hides_no_other_keys_run(store: Store) -> None:
    await store.limits.set(ConcurrencyLimit("a", 1, key="A"))
    for i in range(MANY):
        await add(store, f"a{i}", "A")
    await add(store, "b0", "B")
    assert await claimed(store, 1) == ["a0"]
    # Key A is at its limit: its 39 others are passed over, B's run (queued last) is taken.
    assert await claimed(store, 1) == ["b0"]
    assert await claimed(store, 1) == []
    assert await store.leases.release("a0", 1, Status.SUCCEEDED)
    assert await claimed(store, 1) == ["a1"]


async def test_runs_pinned_to_another_version_hide_no_claimable_run_of_their_key(
    store: Store,
) -> None:
    await store.limits.set(ConcurrencyLimit("a", 5, key="A"))
    for i in range(MANY):
        await add(store, f"v2-{i}", "A", agent_version="v2")
    await add(store, "v1", "A", agent_version="v1")
    await add(store, "any", "A")
    serves = Serves({"a": "v1"})
    assert await claimed(store, 1, serves=serves) == ["v1"]
    assert await claimed(store, 1, serves=serves) == ["any"]
    assert await claimed(store, 1, serves=serves) == []
    assert await claimed(store, 1, serves=Serves({"a": "v2"})) == ["v2-0"]


async def test_turns_count_every_agent_s_runs_of_a_key_however_many_are_queued(
    store: Store,
) -> None:
    # Agent a holds its only slot; its many runs of key K wait. Turns are counted per key
    # over all agents, so b's run of K comes after its one queued run of K at priority 0:
    # its second turn, after t's first.
    await store.limits.set(ConcurrencyLimit("a", 1))
    await add(store, "held", "X")
    assert await claimed(store, 1) == ["held"]
    for i in range(MANY):
        await add(store, f"k{i}", "K", priority=1)
    await add(store, "s", "K")
    await add(store, "r", "K", agent="b")
    await add(store, "t", "T", agent="b")
    assert await claimed(store, 1) == ["t"]
    assert await claimed(store, 1) == ["r"]
    assert await claimed(store, 1) == []


async def test_a_key_limit_holds_in_one_claim_while_every_run_of_its_key_is_ranked(
    store: Store,
) -> None:
    # Agent a has more runs of key K queued than a claim ranks of one (agent, key), and b
    # has one too: the claim then ranks every runnable run (turns of K count both agents),
    # and a's runs of K are still admitted only up to K's limit within the one claim.
    await store.limits.set(ConcurrencyLimit("a", 2, key="K"))
    for i in range(MANY + 10):
        await add(store, f"k{i}", "K")
    await add(store, "r", "K", agent="b")
    assert sorted(await claimed(store, 5)) == ["k0", "k1", "r"]
    assert await claimed(store, 5) == []

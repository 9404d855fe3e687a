"""Forks of random runs (issue 13): for random dynamic graphs (fan-out, joins, sub-agent
runs, retried failures) and random fork points, the fork's replay equals the source's
prefix, and continuing the fork with the same handlers records the same nodes with the
same outputs as the source (its sub-agent runs included, forked with it). SQLite and
PostgreSQL, a bounded number of examples.
"""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.agents import randomgraph, uid
from tests.test_replay_property import canonical
from tether import Runtime, Status, store_from_url
from tether.model.graph import Graph


def state_of(graph: Graph) -> tuple[object, ...]:
    """What a continuation starts from: completed nodes and outputs, ready ones, usage."""
    done = tuple((n, graph.completed(n).output.json) for n in graph.order)  # type: ignore[union-attr]
    return done, tuple(graph.ready), graph.pending, graph.tokens_in, graph.tokens_out


async def scenario(url: str, seed: int, draw_seq: st.DataObject) -> None:
    async with store_from_url(url) as store:
        runtime = Runtime(store)
        source = await runtime.start(randomgraph, {"seed": seed, "depth": 0}, run_id=uid("psrc"))
        assert source.status is Status.SUCCEEDED
        rows = await store.log.read_all(source.run_id)
        seq = draw_seq.draw(st.integers(0, len(rows) - 2), label="fork at seq")
        fork_id = await runtime.fork(source.run_id, at_seq=seq)

        fork_rows = await store.log.read_all(fork_id)
        assert fork_rows[1:] == rows[1 : seq + 1]  # the prefix, record for record
        then = await runtime.load(source.run_id, at_seq=seq)
        assert state_of(await runtime.load(fork_id)) == state_of(then)

        outcome = await runtime.resume(fork_id)
        for _ in range(3):  # a sub-agent run cut mid-way may pause its parent; bounded
            if outcome.status is not Status.PAUSED:
                break
            outcome = await runtime.resume(fork_id)
        assert (outcome.status, outcome.result) == (Status.SUCCEEDED, source.result)
        assert await canonical(store, fork_id) == await canonical(store, source.run_id)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=st.integers(0, 2**32), where=st.data())
def test_a_fork_replays_its_prefix_and_continues_like_its_source(
    durable_store_url: str, seed: int, where: st.DataObject
) -> None:
    asyncio.run(scenario(durable_store_url, seed, where))

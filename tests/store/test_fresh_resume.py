"""A fresh process's resume opens no connection between the command's start and its first
node (issue 12, recovery in a fresh process): opening a store on a migrated database opens
only the pool (migrations are checked on its connection), the resume's RunResumed and status
go in one pooled statement, and the append notifier connects once the node has started."""

from __future__ import annotations

from typing import Any

from tests.agents import uid
from tether import Budget, Context, Node, NodeResult, Registry, Runtime, Spawn, Status
from tether.store.postgres import PostgresStore

chain = Registry("test.fresh.chain", entry="step")
# The connections the store had opened of its own (outside the pool) as each node started.
connects_at_start: list[int] = []
connects: list[str] = []


@chain.node("step")
async def step(ctx: Context, node: Node) -> NodeResult:
    connects_at_start.append(len(connects))
    left: int = node.input
    if left <= 1:
        return NodeResult(left, is_result=True)
    return NodeResult(left, spawn=[Spawn("step", left - 1)])


def counting(store: PostgresStore) -> None:
    """Count the store's own connects (append lanes, notifier, migrations, listeners)."""
    connect_one = store._db.connect_one

    async def counted(**kwargs: Any) -> Any:
        connects.append(str(kwargs))
        return await connect_one(**kwargs)

    store._db.connect_one = counted  # type: ignore[method-assign]


async def test_a_fresh_resume_connects_nothing_before_its_first_node(pg_database: str) -> None:
    run_id = uid("fresh")
    async with PostgresStore(pg_database) as first:
        paused = await Runtime(first).start(chain, 3, run_id=run_id, budget=Budget(max_nodes=1))
    assert paused.status is Status.PAUSED
    connects.clear()
    connects_at_start.clear()
    store = PostgresStore(pg_database)
    counting(store)
    await store.open()
    try:
        assert connects == []  # the schema is current: no migration connection
        done = await Runtime(store).resume(run_id, budget=Budget())
    finally:
        await store.close()
    assert done.status is Status.SUCCEEDED
    assert connects_at_start[0] == 0  # nothing connected before the first node ran
    assert len(connects) >= 1  # the append lane (and the notifier) connected after it

"""Three releases of one agent, for the replay check (`tether check`) tests."""

from __future__ import annotations

from tether import Context, Node, Registry

NAME = "test.tlog.agent"
SHAPE = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


async def _noop(ctx: Context, node: Node) -> None:
    return None


def release(version: str, kinds: dict[str, object | None]) -> Registry:
    """A release of the agent with a handler (and input shape, or None) for each kind."""
    agent = Registry(NAME, version=version, entry=next(iter(kinds)))
    for kind, shape in kinds.items():
        agent.add(kind, _noop, input=shape)
    return agent


# 1: the code runs were saved with; 2: `plan` renamed `outline`; 3: `plan` takes a string q.
v1 = release("1", {"plan": None})
v2 = release("2", {"outline": None})
v3 = release("3", {"plan": SHAPE})

"""Input checked at the door (issue 10): an agent's declared input shape and caller run ids.

A bad input or run id is refused before anything is recorded, on every backend.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from tests.agents import uid
from tether import BadInput, BadRunId, Context, Node, NodeResult, Registry, Runtime, Store


class Question(BaseModel):
    question: str
    depth: int = 1


def _echo(reg: Registry) -> None:
    @reg.node("answer")
    async def answer(ctx: Context, node: Node) -> NodeResult:
        return NodeResult(node.input, is_result=True)


typed = Registry("test.inputs.typed", entry="answer", input=Question)
_echo(typed)
schema = Registry(
    "test.inputs.schema",
    entry="answer",
    input={"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}},
    default_input={"n": 7},
)
_echo(schema)


async def test_a_fitting_input_runs_in_its_json_form(store: Store) -> None:
    outcome = await Runtime(store).start(typed, {"question": "why?"})
    assert outcome.result == {"question": "why?", "depth": 1}


async def test_an_input_that_does_not_fit_is_refused_before_anything_is_recorded(
    store: Store,
) -> None:
    run_id = uid("bad")
    with pytest.raises(BadInput, match=r"'test.inputs.typed': bad input: at depth: "):
        await Runtime(store).start(typed, {"question": "q", "depth": "deep"}, run_id=run_id)
    with pytest.raises(BadInput, match=r"at n: 'x' is not of type 'integer'"):
        await Runtime(store).submit(schema, {"n": "x"}, run_id=run_id)
    assert await store.runs.get(run_id) is None
    assert await store.log.read(run_id) == []


async def test_no_input_takes_the_default_or_is_refused(store: Store) -> None:
    outcome = await Runtime(store).start(schema)
    assert outcome.result == {"n": 7}
    with pytest.raises(BadInput, match=r"at \(the input\): "):
        await Runtime(store).submit(typed)


@pytest.mark.parametrize("bad", ["", "a" * 129, "has space", "dot.ted", "-lead", "é"])
async def test_a_bad_run_id_is_refused_naming_the_rule(store: Store, bad: str) -> None:
    with pytest.raises(BadRunId, match="run id"):
        await Runtime(store).submit(schema, {"n": 1}, run_id=bad)
    assert await store.runs.list() == [] or all(r.run_id != bad for r in await store.runs.list())


def test_a_bad_input_shape_is_refused_when_the_agent_is_declared() -> None:
    with pytest.raises(ValueError, match="invalid input schema"):
        Registry("test.inputs.badschema", input={"type": "nonsense"})
    with pytest.raises(TypeError, match="pydantic model class or a JSON schema"):
        Registry("test.inputs.badtype", input=42)


async def test_the_demo_submitted_without_input_asks_its_default_question(store: Store) -> None:
    from tether.demo.agent import DEFAULT_QUESTION
    from tether.model.records import decode_log

    run_id = await Runtime(store).submit("demo")
    [first] = decode_log(run_id, await store.log.read_all(run_id))
    assert first.run_started.input.json == b'{"prompt":"' + DEFAULT_QUESTION.encode() + b'"}'

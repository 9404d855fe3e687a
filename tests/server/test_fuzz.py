"""Schemathesis fuzzes the API from its own OpenAPI document: no request gets a 5xx."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.server.kit import TOKEN, ServerProcess, start_server
from tether.server.openapi import document

schema = schemathesis.openapi.from_dict(document())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home: Path = tmp_path_factory.mktemp("fuzz")
    # Short streams: a fuzzed request that finds a real run must not hold the test.
    # No start caps: the fuzzer starts runs far faster than the default rate allows.
    proc = start_server(
        home, f"sqlite:///{home / 'tether.db'}", "--max-stream", "0.5",
        "--starts-per-second", "0", "--max-queued", "0",
    )  # fmt: skip
    yield proc
    assert proc.stop() == 0


@schema.parametrize()
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_no_request_gets_a_server_error(case: schemathesis.Case, server: ServerProcess) -> None:
    case.call_and_validate(
        base_url=server.url,
        headers={"Authorization": f"Bearer {TOKEN}"},
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
        timeout=10,
    )


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


_LEAVES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308]),
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3),
    st.text(max_size=20),
    st.integers(),
)
# Deep (json.dumps on this side manages about 900 levels), non-finite, lone surrogates.
HOSTILE = st.one_of(
    _LEAVES,
    st.builds(_nested, st.integers(1, 900), _LEAVES),
    st.recursive(_LEAVES, lambda c: st.lists(c, max_size=3) | st.dictionaries(_LEAVES.filter(
        lambda v: isinstance(v, str)), c, max_size=3), max_leaves=20),
)  # fmt: skip


@given(case=schema["/v1/runs"]["POST"].as_strategy(), hostile=HOSTILE)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_deep_and_non_finite_inputs_get_no_server_error(
    case: schemathesis.Case, hostile: Any, server: ServerProcess
) -> None:
    extra: dict[str, Any] = {}
    if isinstance(case.body, dict):
        # Serialized here: requests would refuse NaN; the server must refuse it instead.
        # A served agent: an unknown one is refused before the input is ever used.
        body = {**case.body, "agent": "demo", "input": hostile}
        extra["data"] = json.dumps(body, allow_nan=True).encode()
    case.call_and_validate(
        base_url=server.url,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        **extra,
        checks=[not_a_server_error, status_code_conformance, content_type_conformance],
        timeout=10,
    )

"""Schemathesis fuzzes the API from its own OpenAPI document: no request gets a 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
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
    proc = start_server(home, f"sqlite:///{home / 'tether.db'}", "--max-stream", "0.5")
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

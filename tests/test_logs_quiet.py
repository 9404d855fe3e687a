"""Worker and server logs carry no line per HTTP request at the default level."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from tether.foundation import logs


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in logs.NOISY}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)


def test_http_libraries_are_quiet_at_the_default_level(restore_logging: None) -> None:
    out = io.StringIO()
    logs.configure("text", stream=out)
    logging.getLogger("httpx").info('HTTP Request: POST http://127.0.0.1/v1 "HTTP/1.1 200 OK"')
    logging.getLogger("httpx2").info('HTTP Request: POST http://127.0.0.1/v1 "HTTP/1.1 200 OK"')
    logging.getLogger("uvicorn.access").info('127.0.0.1 - "GET /v1/runs HTTP/1.1" 200')
    logging.getLogger("tether.control.worker").info("run r1: claimed at epoch 1")
    logging.getLogger("httpx").warning("connection pool full")
    lines = out.getvalue().splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == [
        "run r1: claimed at epoch 1",
        "connection pool full",
    ]


def test_debug_shows_every_request(restore_logging: None) -> None:
    out = io.StringIO()
    logs.configure("text", level=logging.DEBUG, stream=out)
    logging.getLogger("httpx").info("HTTP Request: POST http://127.0.0.1/v1")
    assert "HTTP Request" in out.getvalue()

"""Logging for operators: text or one JSON object a line, with the run in context.

The run, node, owner and epoch a log line is about come from context variables that the
executor sets around a run and each of its nodes, so every `log.info(...)` made while a
run executes carries them without each call passing them. `--log-format json` (or
`TETHER_LOG_FORMAT=json`) on `tether worker` and `tether serve` picks the JSON lines.
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar, Token
from typing import Any, TextIO

from tether.foundation.errors import TetherError

RUN_ID: ContextVar[str | None] = ContextVar("tether_run_id", default=None)
NODE_ID: ContextVar[str | None] = ContextVar("tether_node_id", default=None)
OWNER: ContextVar[str | None] = ContextVar("tether_owner", default=None)
EPOCH: ContextVar[int | None] = ContextVar("tether_epoch", default=None)
FORMATS = ("text", "json")
_TEXT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"
# HTTP libraries that log a line per request (the model SDKs' httpx and httpcore, or their
# successors httpx2 and httpcore2 that newer SDKs use, the SDKs themselves, uvicorn's
# access log): at the default level they would drown what a worker or server says about
# runs, so they speak only from WARNING unless DEBUG is asked.
NOISY = (
    "httpx",
    "httpcore",
    "httpx2",
    "httpcore2",
    "openai",
    "anthropic",
    "uvicorn.access",
)
# Fields a log call may also pass in `extra=`, which win over the context.
_FIELDS = ("run_id", "node_id", "owner", "epoch")


RunTokens = tuple[Token[str | None], Token[str | None], Token[int | None]]


def bind_run(run_id: str, owner: str | None, epoch: int | None) -> RunTokens:
    """Say which run the current task (and the tasks it creates) works on."""
    return RUN_ID.set(run_id), OWNER.set(owner), EPOCH.set(epoch)


def unbind_run(tokens: RunTokens) -> None:
    run_id, owner, epoch = tokens
    RUN_ID.reset(run_id)
    OWNER.reset(owner)
    EPOCH.reset(epoch)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, and the run's ids."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        context = {"run_id": RUN_ID.get(), "node_id": NODE_ID.get(), "owner": OWNER.get(),
                   "epoch": EPOCH.get()}  # fmt: skip
        for field in _FIELDS:
            value = getattr(record, field, context[field])
            if value is not None:
                line[field] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def log_format(choice: str | None) -> str:
    """The format asked for (the flag, else `TETHER_LOG_FORMAT`: `Settings.log_format`),
    else text."""
    chosen = (choice or "text").strip().lower()
    if chosen not in FORMATS:
        raise TetherError(
            f"log format {chosen!r} is not one of {', '.join(FORMATS)} (--log-format or "
            "TETHER_LOG_FORMAT)"
        )
    return chosen


def configure(choice: str | None, level: int = logging.INFO, stream: TextIO | None = None) -> str:
    """Send tether's logs to stderr in the chosen format; return the format."""
    chosen = log_format(choice)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if chosen == "json" else logging.Formatter(_TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in NOISY:
        logging.getLogger(name).setLevel(logging.WARNING if level > logging.DEBUG else level)
    return chosen

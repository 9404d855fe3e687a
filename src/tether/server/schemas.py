"""Request bodies as pydantic models: validation errors name the field and what was wrong."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tether.core import Budget

MAX_BODY_BYTES = 1 << 20

M = TypeVar("M", bound=BaseModel)


class BudgetIn(BaseModel):
    """Run limits; 0 means unlimited. On resume, only the fields given change."""

    model_config = ConfigDict(extra="forbid")

    max_nodes: int | None = Field(default=None, ge=0, le=10**9)
    max_tokens: int | None = Field(default=None, ge=0, le=10**15)
    max_cost: float | None = Field(default=None, ge=0, le=1e12, allow_inf_nan=False)
    max_wall_s: float | None = Field(default=None, ge=0, le=1e9, allow_inf_nan=False)
    max_turns: int | None = Field(default=None, ge=0, le=10**9)

    def given(self) -> dict[str, float]:
        return {k: v for k, v in self.model_dump().items() if v is not None}

    def budget(self) -> Budget:
        return Budget(**self.given())  # type: ignore[arg-type]


class StartRun(BaseModel):
    """POST /v1/runs."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, max_length=200, description="an agent this server runs")
    input: Any = Field(default=None, description="the run's input, any JSON value")
    budget: BudgetIn | None = None


class ResumeRun(BaseModel):
    """POST /v1/runs/{run_id}/resume."""

    model_config = ConfigDict(extra="forbid")

    budget: BudgetIn | None = Field(
        default=None, description="new limits; fields left out keep the run's current ones"
    )


class BadRequest(Exception):
    """A request the server refuses with a 4xx that says what was wrong."""

    def __init__(self, status: int, kind: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.details = details


def parse_body(model: type[M], raw: bytes, *, optional: bool = False) -> M:
    """Validate a JSON body; BadRequest (413, 400 or 422) naming the problem."""
    if len(raw) > MAX_BODY_BYTES:
        raise BadRequest(413, "too_large", f"request body over {MAX_BODY_BYTES} bytes")
    if not raw.strip() and optional:
        return model()
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(400, "invalid_json", f"request body is not valid JSON: {exc}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = [
            {"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()
        ]
        first = details[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise BadRequest(422, "validation", f"{where}: {first['msg']}", details) from None

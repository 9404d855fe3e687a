"""Request bodies as pydantic models: validation errors name the field and what was wrong."""

from __future__ import annotations

import json
import math
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from tether.foundation.core import Budget
from tether.model.budgets import LIMIT_RULE, Change, limit_value

MAX_BODY_BYTES = 1 << 20
# Deep enough for any real input; shallow enough that nothing downstream (pydantic's
# serializer stops near 255, protobuf and json near the recursion limit) can choke on it.
MAX_DEPTH = 100

M = TypeVar("M", bound=BaseModel)


# The largest limit a request may set, by Budget field.
MOST = {
    "max_nodes": 10**9,
    "max_tokens": 10**15,
    "max_cost": 1e12,
    "max_wall_s": 1e9,
    "max_turns": 10**9,
}


class BudgetIn(BaseModel):
    """Run limits; 0 means unlimited. On resume, only the fields given change."""

    model_config = ConfigDict(extra="forbid")

    max_nodes: int | None = Field(default=None, ge=0, le=MOST["max_nodes"])
    max_tokens: int | None = Field(default=None, ge=0, le=MOST["max_tokens"])
    max_cost: float | None = Field(default=None, ge=0, le=MOST["max_cost"], allow_inf_nan=False)
    max_wall_s: float | None = Field(default=None, ge=0, le=MOST["max_wall_s"], allow_inf_nan=False)
    max_turns: int | None = Field(default=None, ge=0, le=MOST["max_turns"])

    def given(self) -> dict[str, float]:
        return {k: v for k, v in self.model_dump().items() if v is not None}

    def budget(self) -> Budget:
        return Budget(**self.given())  # type: ignore[arg-type]


class BudgetChangeIn(BaseModel):
    """New limits for a resume or a fork: a number replaces one (0: none), `"+N"` is N more
    than the run used so far (as `--budget nodes=+2` in the CLI); fields left out are kept."""

    model_config = ConfigDict(extra="forbid")

    max_nodes: int | str | None = None
    max_tokens: int | str | None = None
    max_cost: float | str | None = None
    max_wall_s: float | str | None = None
    max_turns: int | str | None = None

    @field_validator("*")
    @classmethod
    def _limit(cls, value: float | str | None, info: ValidationInfo) -> float | str | None:
        if value is None:
            return None
        try:
            amount, relative = limit_value(value)
            if isinstance(value, str) and not relative:
                raise ValueError(LIMIT_RULE)
        except ValueError as exc:
            raise ValueError(f"{value!r}: {exc}") from None
        most = MOST[info.field_name or ""]
        if amount > most:
            raise ValueError(f"{value!r}: at most {most:g}")
        return value

    def change(self) -> Change:
        return {k: limit_value(v) for k, v in self.model_dump().items() if v is not None}


class StartRun(BaseModel):
    """POST /v1/runs."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, max_length=200, description="an agent this server runs")
    input: Any = Field(default=None, description="the run's input, any JSON value")
    budget: BudgetIn | None = None
    key: str | None = Field(
        default=None, min_length=1, max_length=200, description="its concurrency key"
    )
    priority: int = Field(
        default=0, ge=-(2**31) + 1, le=2**31 - 1, description="claimed before lower ones"
    )


class AddSchedule(BaseModel):
    """POST /v1/schedules."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, description="letters, digits, '_' and '-'")
    cron: str = Field(min_length=1, max_length=200, description="5 fields, or 6 with seconds first")
    agent: str = Field(min_length=1, max_length=200, description="an agent this server runs")
    input: Any = Field(default=None, description="each run's input, any JSON value")
    timezone: str = Field(default="UTC", min_length=1, max_length=100, description="IANA zone")
    catch_up: Literal["skip", "once"] = Field(
        default="skip", description="times missed while no worker ran: skip, or run once"
    )


class SetLimit(BaseModel):
    """PUT /v1/limits."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, max_length=200, description="an agent this server runs")
    key: str | None = Field(
        default=None, min_length=1, max_length=200, description="only the runs with this key"
    )
    each_key: bool = Field(default=False, description="each concurrency key apart")
    max_running: int = Field(description="runs at once, 1 or more")


class ResumeRun(BaseModel):
    """POST /v1/runs/{run_id}/resume."""

    model_config = ConfigDict(extra="forbid")

    budget: BudgetChangeIn | None = Field(
        default=None,
        description='new limits, or "+N" for N more than used so far; fields left out keep '
        "the run's current ones",
    )


class UpgradeRun(BaseModel):
    """POST /v1/runs/{run_id}/upgrade."""

    model_config = ConfigDict(extra="forbid")

    to: str = Field(min_length=1, max_length=200, description="the version to move the run to")


class ForkRun(BaseModel):
    """POST /v1/runs/{run_id}/fork: exactly one of `at_seq` and `before_node`."""

    model_config = ConfigDict(extra="forbid")

    at_seq: int | None = Field(
        default=None, ge=0, le=2**62, description="keep the source's records up to this seq"
    )
    before_node: str | None = Field(
        default=None,
        min_length=1,
        max_length=400,
        description="keep the source's records before the one that recorded this node",
    )
    set_outputs: dict[str, Any] | None = Field(
        default=None, description="node id -> output replacing the one recorded"
    )
    set_inputs: dict[str, Any] | None = Field(
        default=None, description="node id -> input replacing that of a node pending there"
    )
    budget: BudgetChangeIn | None = Field(
        default=None,
        description='new limits, or "+N" for N more than the source had used at the fork '
        "point; fields left out keep the ones it had there",
    )


class BadRequest(Exception):
    """A request the server refuses with a 4xx that says what was wrong."""

    def __init__(self, status: int, kind: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.details = details


def _not_finite(token: str) -> Any:
    raise BadRequest(400, "non_finite_number", f"{token} is not JSON: numbers must be finite")


def _finite_float(raw: str) -> float:
    value = float(raw)
    if not math.isfinite(value):
        raise BadRequest(400, "non_finite_number", f"{raw[:40]} overflows a float")
    return value


def check_json_value(data: Any, *, what: str = "request body") -> None:
    """BadRequest unless `data` nests at most MAX_DEPTH deep and every string is valid UTF-8.

    Iterative, so a hostile depth never reaches the recursion limit here.
    """
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BadRequest(400, "too_deep", f"{what} nests deeper than {MAX_DEPTH} levels")
        if isinstance(value, str):
            _check_text(value, what)
        elif isinstance(value, dict):
            for key, item in value.items():
                _check_text(key, what)
                stack.append((item, depth + 1))
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)


def _check_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # json.loads accepts "\ud800" escapes; nothing can store or send them back.
        raise BadRequest(
            400, "invalid_unicode", f"{what} has a lone surrogate (\\ud800-\\udfff) in a string"
        ) from None


def loads(raw: bytes | str, *, what: str = "request body") -> Any:
    """json.loads for untrusted input: BadRequest (400) for anything tether cannot keep."""
    try:
        data = json.loads(raw, parse_constant=_not_finite, parse_float=_finite_float)
    except RecursionError:
        raise BadRequest(400, "too_deep", f"{what} nests deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(400, "invalid_json", f"{what} is not valid JSON: {exc}") from None
    check_json_value(data, what=what)
    return data


def parse_body(
    model: type[M], raw: bytes, *, optional: bool = False, limit: int = MAX_BODY_BYTES
) -> M:
    """Validate a JSON body; BadRequest (413, 400 or 422) naming the problem."""
    if len(raw) > limit:
        raise BadRequest(413, "too_large", f"request body over {limit} bytes")
    if not raw.strip() and optional:
        return model()
    data = loads(raw)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = [
            {"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()
        ]
        first = details[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise BadRequest(422, "validation", f"{where}: {first['msg']}", details) from None

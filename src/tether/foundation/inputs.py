"""Checked at the door: a run's input against its agent's declared shape.

An agent declares its input as a pydantic model or a JSON schema (`Registry(input=...)`,
with an optional `default_input=`); `Runtime.create` (so `Runtime.start`, `tether submit`
and `POST /v1/runs`) refuses an input that does not fit with `BadInput` naming where it
went wrong, before anything is recorded. Run ids are checked in `tether.foundation.ids`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.foundation.errors import BadInput


class InputShape:
    """The declared shape of an agent's input: a pydantic model class or a JSON schema."""

    def __init__(self, shape: Any) -> None:
        self.model: Any = None
        self.schema: dict[str, Any] | None = None
        if isinstance(shape, Mapping):
            from jsonschema import SchemaError, validators

            schema = dict(shape)
            try:
                validators.validator_for(schema).check_schema(schema)
            except SchemaError as exc:
                raise ValueError(f"invalid input schema: {exc.message}") from None
            self.schema = schema
        elif hasattr(shape, "model_validate"):
            self.model = shape
        else:
            raise TypeError(f"input must be a pydantic model class or a JSON schema, not {shape!r}")

    def check(self, agent: str, value: Any) -> Any:
        """The input to record (a pydantic model's JSON form); BadInput if it does not fit."""
        if self.model is not None:
            from pydantic import ValidationError

            try:
                return self.model.model_validate(value).model_dump(mode="json")
            except ValidationError as exc:
                first = exc.errors()[0]
                where = "/".join(str(p) for p in first["loc"]) or "(the input)"
                raise BadInput(agent, f"at {where}: {first['msg']}") from None
        assert self.schema is not None
        from jsonschema import validators

        errors = sorted(
            validators.validator_for(self.schema)(self.schema).iter_errors(value), key=str
        )
        if errors:
            where = "/".join(str(p) for p in errors[0].absolute_path) or "(the input)"
            raise BadInput(agent, f"at {where}: {errors[0].message}")
        return value

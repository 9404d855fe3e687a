"""GET /openapi.json: the API described for clients and for schemathesis to fuzz."""

from __future__ import annotations

from functools import cache
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tether.server.schemas import (
    AddSchedule,
    ForkRun,
    ResumeRun,
    SetLimit,
    StartRun,
    UpgradeRun,
)
from tether.store.base import STATES

_REF = "#/components/schemas/{model}"


def _json(schema: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}


def _err(description: str) -> dict[str, Any]:
    return {"description": description, "content": _json("Error")}


_RUN_ID = {"name": "run_id", "in": "path", "required": True,
           "schema": {"type": "string", "minLength": 1, "maxLength": 400}}  # fmt: skip
_AUTH = {"401": _err("missing or wrong bearer token")}
_TLOG = {"application/vnd.tether.tlog": {"schema": {"type": "string", "format": "binary"}}}
_UNKNOWN = {"404": _err("no such run"), "400": _err("malformed run id or parameter")}
# A run view's two words (docs/reference/show-json.md), as `tether runs` and `show` say them.
_STATUS = (
    "queued, running, paused, waiting, succeeded, failed or cancelled (the run's row; "
    "with `at`, the log's at that seq)"
)
_STATE = "the status, or `orphaned` for a running run whose owner's lease ran out"


def _op(summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"summary": summary, "responses": {**responses, **_AUTH}, **extra}


_LIST_FLAGS = (
    ("top", "only top-level runs (no sub-agent runs)"),
    (
        "usage",
        "each row gets `usage`: nodes, tokens, cost and wall time so far (at most 200 logs "
        "are read per request: rows past that get `usage: null` and `usage_partial` is true)",
    ),
    ("children", "each row gets `children`: its sub-agent runs, at any depth"),
)


@cache
def document() -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for model in (StartRun, ResumeRun, ForkRun, UpgradeRun, AddSchedule, SetLimit):
        full = model.model_json_schema(ref_template=_REF)
        schemas.update(full.pop("$defs", {}))
        schemas[model.__name__] = full
    obj = {"type": "object"}
    schemas.update(
        Error={
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["type", "message"],
                    "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
                }
            },
        },
        RunAccepted={
            "type": "object",
            "required": ["run_id", "status", "urls"],
            "properties": {"run_id": {"type": "string"}, "status": {"type": "string"}, "urls": obj},
        },
        RunForked={
            "type": "object",
            "required": ["run_id", "status", "forked_from", "urls"],
            "properties": {
                "run_id": {"type": "string"},
                "status": {"type": "string"},
                "forked_from": {"type": "string"},
                "urls": obj,
            },
        },
        Imported={
            "type": "object",
            "required": ["run_id", "created", "records", "blobs", "already"],
            "properties": {
                "run_id": {"type": "string"},
                "created": {"type": "array", "items": {"type": "string"}},
                "records": {"type": "integer"},
                "blobs": {"type": "integer"},
                "already": {"type": "boolean"},
            },
        },
        Run={
            "type": "object",
            "required": ["run_id", "status", "state", "budget", "nodes", "counts"],
            "properties": {
                "status": {"type": "string", "description": _STATUS},
                "state": {"type": "string", "description": _STATE},
                "retries": {
                    "type": "array",
                    "description": "each retry of the run after it failed (POST .../retry): "
                    "the seq of its run_resumed, how the run had failed, the nodes that ran "
                    "again; a node that ever failed lists its `attempts` (each failed one "
                    "with its error, then the completed one)",
                    "items": {
                        "type": "object",
                        "required": ["seq", "at_us", "error", "node_ids"],
                        "properties": {
                            "seq": {"type": "integer"},
                            "at_us": {"type": "integer"},
                            "error": {"type": "string"},
                            "node_ids": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                },
            },
        },
        Workers={
            "type": "object",
            "required": ["workers"],
            "properties": {"workers": {"type": "array", "items": obj}},
        },
        EventRecorded={
            "type": "object",
            "required": ["run_id", "key", "seq", "duplicate", "status", "urls"],
            "properties": {
                "run_id": {"type": "string"},
                "key": {"type": "string"},
                "seq": {"type": ["integer", "null"]},
                "duplicate": {"type": "boolean"},
                "status": {"type": "string"},
                "urls": obj,
            },
        },
        Schedule={
            "type": "object",
            "required": ["name", "cron", "agent", "timezone", "catch_up", "next_at"],
            "properties": {
                "name": {"type": "string"},
                "cron": {"type": "string"},
                "agent": {"type": "string"},
                "input": {},
                "timezone": {"type": "string"},
                "catch_up": {"type": "string"},
                "created_at": {"type": "number"},
                "next_at": {"type": "number"},
            },
        },
        Schedules={
            "type": "object",
            "required": ["schedules"],
            "properties": {"schedules": {"type": "array", "items": obj}},
        },
        Limit={
            "type": "object",
            "required": ["agent", "key", "each_key", "max_running", "running"],
            "properties": {
                "agent": {"type": "string"},
                "key": {"type": ["string", "null"]},
                "each_key": {"type": "boolean"},
                "max_running": {"type": "integer"},
                "running": {"type": "integer"},
            },
        },
        Limits={
            "type": "object",
            "required": ["limits"],
            "properties": {"limits": {"type": "array", "items": obj}},
        },
        LimitRemoved={
            "type": "object",
            "required": ["scope", "removed"],
            "properties": {"scope": {"type": "string"}, "removed": {"type": "boolean"}},
        },
        ScheduleRemoved={
            "type": "object",
            "required": ["name", "removed"],
            "properties": {"name": {"type": "string"}, "removed": {"type": "boolean"}},
        },
        RunList={
            "type": "object",
            "required": ["runs", "next"],
            "properties": {"runs": {"type": "array"}, "next": {"type": ["string", "null"]}},
        },
    )
    start_body = {"required": True, "content": _json("StartRun")}
    resume_body = {"required": False, "content": _json("ResumeRun")}
    bad = {"400": _err("malformed request"), "422": _err("invalid field; the message names it")}
    conflict = {"409": _err("the run has finished, or is executing already")}
    paths: dict[str, Any] = {
        "/healthz": {"get": {"summary": "liveness", "security": [], "responses": {"200": {
            "description": "alive"}}}},
        "/readyz": {"get": {"summary": "readiness: only whether, never why (see the log)",
                             "security": [], "responses": {
            "200": {"description": "ready"}, "503": {"description": "not ready"}}}},
        "/metrics": {"get": _op(
            "Prometheus metrics in the text exposition format",
            {"200": {"description": "a scrape",
                     "content": {"text/plain": {"schema": {"type": "string"}}}},
             "404": _err("metrics are off (the metrics extra is not installed)")})},
        "/v1/runs": {
            "post": _op(
                "start a run; answers at once",
                {"202": {"description": "accepted", "content": _json("RunAccepted")}, **bad,
                 "409": _err("Idempotency-Key reused for a different request"),
                 "413": _err("body too large"),
                 "429": _err("too many queued runs or starts; see Retry-After")},
                requestBody=start_body,
                parameters=[{"name": "Idempotency-Key", "in": "header", "required": False,
                             "schema": {"type": "string", "minLength": 1, "maxLength": 200}}],
            ),
            "get": _op(
                "list runs, newest first",
                {"200": {"description": "a page of runs", "content": _json("RunList")},
                 "400": _err("bad filter or page")},
                parameters=[
                    {"name": "status", "in": "query", "required": False,
                     "description": "runs in this state as views show it (`orphaned`: "
                     "running under a lease that ran out; `running` leaves those out)",
                     "schema": {"type": "string", "enum": list(STATES)}},
                    {"name": "limit", "in": "query", "required": False,
                     "schema": {"type": "integer", "minimum": 1, "maximum": 500}},
                    {"name": "offset", "in": "query", "required": False,
                     "schema": {"type": "integer", "minimum": 0, "maximum": 10**9}},
                    {"name": "agent", "in": "query", "required": False,
                     "description": "only runs of this agent",
                     "schema": {"type": "string", "maxLength": 400}},
                    {"name": "q", "in": "query", "required": False,
                     "description": "only runs whose id starts with this",
                     "schema": {"type": "string", "maxLength": 400}},
                    {"name": "parent", "in": "query", "required": False,
                     "description": "only the sub-agent runs of this run",
                     "schema": {"type": "string", "maxLength": 400}},
                    *({"name": flag, "in": "query", "required": False, "description": what,
                       "schema": {"type": "string", "enum": ["0", "1"]}}
                      for flag, what in _LIST_FLAGS),
                ],
            ),
        },
        "/v1/runs/{run_id}": {"get": _op(
            "status, budget used, counts, timings and nodes of a run; with `at`, as they "
            "were once the record at that seq was (graph, budget and outputs)",
            {"200": {"description": "the run", "content": _json("Run")}, **_UNKNOWN,
             "400": _err("`at` is not a seq")},
            parameters=[_RUN_ID, {"name": "outputs", "in": "query", "required": False,
                                  "schema": {"type": "string", "enum": ["0", "1"]}},
                        {"name": "at", "in": "query", "required": False,
                         "schema": {"type": "integer", "minimum": 0}}],
        )},
        "/v1/runs/{run_id}/events": {"get": _op(
            "the run's records as Server-Sent Events (id = seq), resumable",
            {"200": {"description": "an event stream", "content": {"text/event-stream": {
                "schema": {"type": "string"}}}},
             "204": {"description": "the run finished and the client has its last record"},
             **_UNKNOWN, "400": _err("bad seq")},
            parameters=[
                _RUN_ID,
                {"name": "after", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": -1}},
                {"name": "tokens", "in": "query", "required": False,
                 "schema": {"type": "string", "enum": ["0", "1"]}},
                {"name": "Last-Event-ID", "in": "header", "required": False,
                 "schema": {"type": "string"}},
            ],
        )},
        "/v1/runs/{run_id}/cancel": {"post": _op(
            "cancel a run: it finishes CANCELLED (disconnecting never does)",
            {"200": {"description": "the run's status", "content": _json("RunAccepted")},
             **_UNKNOWN, **conflict},
            parameters=[_RUN_ID],
        )},
        "/v1/runs/{run_id}/resume": {"post": _op(
            "resume a paused or interrupted run, optionally with a larger budget",
            {"202": {"description": "resuming", "content": _json("RunAccepted")},
             **_UNKNOWN, **bad,
             "409": _err("the run has finished, or is executing already, or is paused by "
                         "its budget and the budget given does not raise what ran out")},
            parameters=[_RUN_ID],
            requestBody=resume_body,
        )},
        "/v1/runs/{run_id}/retry": {"post": _op(
            "retry a failed run: everything it recorded stays, a RunResumed with `retry` is "
            "appended and the run is queued; each node that failed runs again as a new "
            "attempt numbered after its last, then the run continues (the run view's "
            "`retries` and each node's `attempts` show the history)",
            {"202": {"description": "retried: queued for a worker",
                     "content": _json("RunAccepted")},
             **_UNKNOWN,
             "409": _err("`run_not_failed`: the run did not fail (running, paused, waiting, "
                         "queued, succeeded or cancelled), or is a sub-agent run (retry its "
                         "parent)")},
            parameters=[_RUN_ID],
        )},
        "/v1/runs/{run_id}/fork": {"post": _op(
            "a new queued run whose history is this run's records up to `at_seq` (or before "
            "`before_node` was recorded), with `set_outputs` replacing recorded outputs and "
            "`set_inputs` the inputs of nodes pending there; the fork references the source's "
            "records instead of copying them",
            {"201": {"description": "the fork, queued", "content": _json("RunForked")},
             **_UNKNOWN, **bad},
            parameters=[_RUN_ID],
            requestBody={"required": True, "content": _json("ForkRun")},
        )},
        "/v1/runs/{run_id}/upgrade": {"post": _op(
            "move a run to another version of its agent's code: the server's code must be "
            "that version, have a handler for every pending kind, and pending inputs must fit",
            {"200": {"description": "moved; the run keeps its status",
                     "content": _json("RunAccepted")},
             **_UNKNOWN, **conflict, **bad},
            parameters=[_RUN_ID],
            requestBody={"required": True, "content": _json("UpgradeRun")},
        )},
        "/v1/workers": {"get": _op(
            "the live workers: agent versions served, runs held, last heartbeat",
            {"200": {"description": "the workers", "content": _json("Workers")}},
        )},
        "/v1/limits": {
            "get": _op(
                "the concurrency limits workers' claims enforce, with the slots held now",
                {"200": {"description": "the limits", "content": _json("Limits")}},
            ),
            "put": _op(
                "cap the runs of an agent, of one of its keys, or of each key, at once",
                {"200": {"description": "set", "content": _json("Limit")}, **bad},
                requestBody={"required": True, "content": _json("SetLimit")},
            ),
            "delete": _op(
                "lift a concurrency limit: the runs that waited for it are claimable at once",
                {"200": {"description": "removed", "content": _json("LimitRemoved")},
                 "400": _err("no agent given"), "404": _err("no limit of that scope"),
                 "422": _err("a bad agent name or key")},
                parameters=[
                    {"name": "agent", "in": "query", "required": True,
                     "schema": {"type": "string", "minLength": 1, "maxLength": 200}},
                    {"name": "key", "in": "query", "required": False,
                     "schema": {"type": "string", "maxLength": 200}},
                    {"name": "each_key", "in": "query", "required": False,
                     "schema": {"type": "string", "enum": ["0", "1", "true", "false"]}},
                ],
            ),
        },
        "/v1/schedules": {
            "get": _op(
                "the schedules: cron, agent, input, time zone, next fire time",
                {"200": {"description": "the schedules", "content": _json("Schedules")}},
            ),
            "post": _op(
                "add a schedule: workers start a run of `agent` at each `cron` time, once",
                {"201": {"description": "added", "content": _json("Schedule")}, **bad,
                 "409": _err("a schedule with this name exists")},
                requestBody={"required": True, "content": _json("AddSchedule")},
            ),
        },
        "/v1/schedules/{name}": {"delete": _op(
            "remove a schedule (the runs it queued stay)",
            {"200": {"description": "removed", "content": _json("ScheduleRemoved")},
             "404": _err("no such schedule")},
            parameters=[{"name": "name", "in": "path", "required": True,
                         "schema": {"type": "string", "minLength": 1, "maxLength": 200}}],
        )},
        "/v1/runs/{run_id}/signals/{key}": {"post": _op(
            "deliver an event (the body is its JSON payload) to the run's wait `key`; "
            "answered once the event is in the run's log; events for a wait that does not "
            "exist yet are refused, not buffered",
            {"202": {"description": "recorded", "content": _json("EventRecorded")},
             "200": {"description": "this event (Idempotency-Key) was recorded before",
                     "content": _json("EventRecorded")},
             "400": _err("malformed JSON, key or event id"),
             "404": _err("no such run, or no wait with this key"),
             "409": _err("the wait was answered or timed out, is a sleep, or the run finished"),
             "413": _err("body too large"),
             "422": _err("the payload does not fit the wait's schema"),
             "503": _err("the run is held by another process; see Retry-After")},
            parameters=[
                _RUN_ID,
                {"name": "key", "in": "path", "required": True,
                 "schema": {"type": "string", "minLength": 1, "maxLength": 200}},
                {"name": "Idempotency-Key", "in": "header", "required": False,
                 "schema": {"type": "string", "minLength": 1, "maxLength": 200}},
                {"name": "event_id", "in": "query", "required": False,
                 "schema": {"type": "string", "minLength": 1, "maxLength": 200}},
            ],
            requestBody={"required": False, "content": {"application/json": {"schema": {}}}},
        )},
        "/v1/runs/{run_id}/export": {"get": _op(
            "the run, its sub-agent runs and (with `blobs=true`) their blobs as a `.tlog` "
            "file (docs/reference/tlog.md), streamed as it is written",
            {"200": {"description": "the file", "content": _TLOG},
             **_UNKNOWN, "422": _err("a sub-agent run (export its parent), or sealed blobs")},
            parameters=[
                _RUN_ID,
                {"name": "blobs", "in": "query", "required": False,
                 "schema": {"type": "boolean"}},
            ],
        )},
        "/v1/runs/import": {"post": _op(
            "import a `.tlog` file into this store, all or nothing: checked whole first, then "
            "every run created in one transaction; a second import of it creates nothing",
            {"201": {"description": "the runs created", "content": _json("Imported")},
             "200": {"description": "the store had them all; nothing created",
                     "content": _json("Imported")},
             "422": _err("the file is truncated, damaged, of a newer format, or holds a blob "
                         "whose bytes do not match its hash; the message says which"),
             "409": _err("this store holds a different run under one of the file's ids"),
             "413": _err("the file is over the server's import limit (`--max-import`)")},
            # Any content type is read as the file; octet-stream is what fuzzers can send.
            requestBody={"required": True, "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
        )},
        "/v1/blobs/{sha256}": {"get": _op(
            "a blob that a record of the run points to",
            {"200": {"description": "the bytes, with their media type",
                     "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}},
             "400": _err("bad hash or no run named"), "404": _err("not referenced or absent"),
             "503": _err("the blob store cannot be read now")},
            parameters=[
                {"name": "sha256", "in": "path", "required": True,
                 "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
                {"name": "run_id", "in": "query", "required": True,
                 "schema": {"type": "string", "minLength": 1}},
            ],
        )},
        "/runs/{run_id}": {"get": _op(
            "the live run page (HTML)",
            {"200": {"description": "the page", "content": {"text/html": {
                "schema": {"type": "string"}}}},
             "303": {"description": "the token traded for a page-session cookie"},
             "404": {"description": "no such run", "content": {"text/html": {
                "schema": {"type": "string"}}}}, "400": _err("malformed run id")},
            parameters=[_RUN_ID],
        )},
        "/runs/{run_id}/events": {"get": _op(
            "the page's own event stream (its session cookie, or the bearer header)",
            {"200": {"description": "an event stream", "content": {"text/event-stream": {
                "schema": {"type": "string"}}}},
             "204": {"description": "the run finished and the client has its last record"},
             **_UNKNOWN, "400": _err("bad seq")},
            parameters=[_RUN_ID, {"name": "after", "in": "query", "required": False,
                                  "schema": {"type": "integer", "minimum": -1}}],
        )},
    }  # fmt: skip
    return {
        "openapi": "3.1.0",
        "info": {"title": "tether", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


async def openapi(request: Request) -> Response:
    return JSONResponse(document())

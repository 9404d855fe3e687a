"""The /v1 routes: start, read, list, stream, cancel and resume runs; fetch blobs."""

from __future__ import annotations

import hashlib
import logging
import uuid
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from tether.control.deploys import CannotUpgrade
from tether.engine.follow import wait_finished
from tether.engine.runtime import parse_config
from tether.foundation import metrics
from tether.foundation.errors import (
    BadFork,
    BadInput,
    BadLimit,
    BadRunId,
    BadSchedule,
    BadTlog,
    BudgetSpent,
    CannotExport,
    CorruptRecord,
    EventRefused,
    ImportConflict,
    ModelNotConfigured,
    RunBusy,
    RunExists,
    RunHeldElsewhere,
    RunNotResumable,
    RunNotRetryable,
    ScheduleExists,
    StoreError,
    StoreFull,
    StoreUnavailable,
    TetherError,
    UnknownAgent,
    UnknownLimit,
    UnknownRun,
    UnknownSchedule,
    UnknownSeq,
)
from tether.foundation.ids import new_run_id
from tether.server.blob_route import get_blob
from tether.server.console import (
    console_page,
    favicon,
    run_children,
    run_page,
    run_page_view,
)
from tether.server.deploy_route import list_workers, upgrade_run
from tether.server.detail import run_detail
from tether.server.events import parse_after, record_stream
from tether.server.fork_route import fork_run
from tether.server.limit_route import delete_limit, list_limits, put_limit
from tether.server.limits import BodyTooLarge, TooMany
from tether.server.listing import list_runs, run_url, urls
from tether.server.openapi import openapi
from tether.server.request import bearer_of, run_id_of, server_of
from tether.server.schedule_route import add_schedule, list_schedules, remove_schedule
from tether.server.schemas import BadRequest, ResumeRun, StartRun, loads, parse_body
from tether.server.tlog_route import export_tlog, import_tlog
from tether.store.base import Status

if TYPE_CHECKING:
    pass

MAX_KEY = 200
log = logging.getLogger("tether.server")


def idempotent_run_id(key: str) -> str:
    """The run id an Idempotency-Key names: a retried start finds the same run."""
    return "idem-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def fingerprint(body: StartRun) -> str:
    """What a retry must repeat for its key to return the first run."""
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


# -- runs ---------------------------------------------------------------------------


async def start_run(request: Request) -> Response:
    server = server_of(request)
    server.starts.take(bearer_of(request))
    body = parse_body(StartRun, await request.body(), limit=server.limits.max_body_bytes)
    if body.agent not in server.agents:
        raise BadRequest(
            422,
            "unknown_agent",
            f"agent {body.agent!r} is not served here; this server runs {list(server.agents)}",
        )
    key = request.headers.get("idempotency-key")
    if key is not None and not 1 <= len(key) <= MAX_KEY:
        raise BadRequest(400, "bad_idempotency_key", f"Idempotency-Key must be 1-{MAX_KEY} chars")
    run_id = idempotent_run_id(key) if key else new_run_id()
    replayed = False
    if not (key and await server.store.runs.get(run_id)):  # a replay queues nothing new
        await server.starts.check_queue(server.store)
    try:
        await server.launcher.start(
            body.agent,
            body.input,
            run_id=run_id,
            budget=body.budget.budget() if body.budget else None,
            config={"request": fingerprint(body)} if key else None,
            key=body.key,
            priority=body.priority,
        )
    except RunExists:
        if not key:
            raise
        graph = await server.runtime.load(run_id)
        started = graph.started
        if started is None or parse_config(started.config).get("request") != fingerprint(body):
            raise BadRequest(
                409,
                "idempotency_key_reused",
                "this Idempotency-Key was used for a different request; use a new key",
            ) from None
        replayed = True
    info = await server.store.runs.get(run_id)
    status = info.status.value if info else Status.QUEUED.value
    headers = {"Location": run_url(run_id)}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return JSONResponse(
        {"run_id": run_id, "status": status, "urls": urls(run_id)}, 202, headers=headers
    )


async def get_run(request: Request) -> Response:
    server = server_of(request)
    outputs = request.query_params.get("outputs") in ("1", "true")
    view = await run_detail(server, run_id_of(request), request.query_params.get("at"), outputs)
    return JSONResponse(view)


async def run_events(request: Request) -> Response:
    server = server_of(request)
    run_id = run_id_of(request)
    try:
        after = parse_after(request.headers.get("last-event-id"), request.query_params.get("after"))
    except ValueError:
        raise BadRequest(
            400, "bad_after", "Last-Event-ID and ?after= must be a seq (an integer >= -1)"
        ) from None
    info = await server.store.runs.get(run_id)
    if info is None:
        raise UnknownRun(run_id)
    if info.status.finished and not await server.store.log.read(run_id, after_seq=after):
        # Finished, and the client has its last record: 204 is what makes a browser's
        # EventSource stop instead of reconnecting forever.
        return Response(status_code=204)
    tokens = request.query_params.get("tokens") in ("1", "true")
    return StreamingResponse(
        record_stream(server, run_id, after, tokens=tokens),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def cancel_run(request: Request) -> Response:
    server = server_of(request)
    run_id = run_id_of(request)
    if await server.store.runs.get(run_id) is None:
        raise UnknownRun(run_id)
    status = await server.launcher.cancel(run_id)
    if not status.finished:
        status = await wait_finished(
            server.store,
            run_id,
            within=server.streams.cancel_wait_s,
            wakeups=server.wakeups,
            poll=server.streams.poll_s,
        )
    return JSONResponse({"run_id": run_id, "status": status.value, "urls": urls(run_id)})


async def resume_run(request: Request) -> Response:
    server = server_of(request)
    run_id = run_id_of(request)
    body = parse_body(
        ResumeRun, await request.body(), optional=True, limit=server.limits.max_body_bytes
    )
    if await server.store.runs.get(run_id) is None:
        raise UnknownRun(run_id)
    status = await server.launcher.resume(
        run_id, budget=body.budget.change() if body.budget else None
    )
    return JSONResponse({"run_id": run_id, "status": status.value, "urls": urls(run_id)}, 202)


async def retry_run(request: Request) -> Response:
    """Reopen a failed run and queue it (`tether.control.actions.retry`)."""
    server = server_of(request)
    run_id = run_id_of(request)
    status = await server.launcher.retry(run_id)
    return JSONResponse({"run_id": run_id, "status": status.value, "urls": urls(run_id)}, 202)


async def signal_run(request: Request) -> Response:
    """Deliver an event (the JSON body is its payload) to wait `key`; answered once the
    event is in the run's log. `Idempotency-Key` (or `?event_id=`) names the event: a
    retried delivery is a no-op answered 200 with `Idempotent-Replayed: true`."""
    server = server_of(request)
    run_id = run_id_of(request)
    key = request.path_params["key"]
    if not 1 <= len(key) <= MAX_KEY:
        raise BadRequest(400, "bad_key", f"a wait key is 1-{MAX_KEY} characters")
    raw, limit = await request.body(), server.limits.max_body_bytes
    if len(raw) > limit:
        raise BadRequest(413, "too_large", f"request body over {limit} bytes")
    payload = loads(raw, what="event payload") if raw.strip() else None
    event_id = request.headers.get("idempotency-key") or request.query_params.get("event_id")
    if event_id is not None and not 1 <= len(event_id) <= MAX_KEY:
        raise BadRequest(400, "bad_idempotency_key", f"an event id is 1-{MAX_KEY} characters")
    done = await server.runtime.signal(run_id, key, payload, event_id=event_id)
    body = {
        "run_id": run_id,
        "key": key,
        "seq": done.seq,
        "duplicate": done.duplicate,
        "status": done.status.value,
        "urls": urls(run_id),
    }
    if done.duplicate:
        return JSONResponse(body, 200, headers={"Idempotent-Replayed": "true"})
    return JSONResponse(body, 202)


# -- health -------------------------------------------------------------------------


async def healthz(request: Request) -> Response:
    return JSONResponse({"ok": True})


async def readyz(request: Request) -> Response:
    server = server_of(request)
    # Unauthenticated: says only whether, never why (a store error names host and db).
    if not server.ready:
        log.info("not ready: starting or shutting down")
        return JSONResponse({"ok": False, "status": "not ready"}, 503)
    try:
        await server.store.runs.list(limit=1)
    except StoreError as exc:  # unreachable, or there but broken (its database dropped)
        log.warning("not ready: %s", exc)
        return JSONResponse({"ok": False, "status": "not ready"}, 503)
    return JSONResponse({"ok": True, "status": "ready"})


async def metrics_text(request: Request) -> Response:
    """Prometheus' scrape: the text format, behind the bearer token like the API."""
    active = metrics.active
    if active is None:
        return JSONResponse(
            {"error": "metrics are off: install tether[metrics] (prometheus-client)"}, 404
        )
    body, content_type = active.exposition()
    return Response(body, media_type=content_type)


# -- errors -------------------------------------------------------------------------


def error(status: int, kind: str, message: str, details: Any = None) -> JSONResponse:
    body: dict[str, Any] = {"type": kind, "message": message}
    if details is not None:
        body["details"] = details
    return JSONResponse({"error": body}, status)


async def _bad_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BadRequest)
    response = error(exc.status, exc.kind, exc.message, exc.details)
    if isinstance(exc, TooMany):
        response.headers["Retry-After"] = str(exc.retry_after_s)
    if isinstance(exc, BodyTooLarge):
        response.headers["Connection"] = "close"  # the rest of the body is never read
    return response


async def _tether_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, EventRefused):  # 404 no such wait, 409 answered, 422 bad payload
        kinds = {404: "unknown_wait", 409: "wait_completed", 422: "bad_payload"}
        return error(exc.status, kinds.get(exc.status, "event_refused"), str(exc))
    if isinstance(exc, RunBusy) and exc.owner:
        # Owners are opaque outside the server (as in run views); the lease left is a detail.
        owner = server_of(request).publish.owner_id(exc.owner) or ""
        details = {"owner": owner, "lease_left_s": exc.lease_left}
        return error(409, "run_busy", str(exc).replace(exc.owner, owner), details)
    if isinstance(exc, StoreUnavailable):
        # Its message names the database (host, port, user): the log gets it, under an id
        # the caller is given to quote.
        request_id = uuid.uuid4().hex[:16]
        log.warning(
            "%s %s: store unavailable (request %s): %s",
            request.method,
            request.url.path,
            request_id,
            exc,
        )
        response = error(
            503, "store_unavailable", f"store unavailable (request {request_id})", None
        )
        response.headers["Retry-After"] = "1"
        response.headers["X-Request-Id"] = request_id
        return response
    if isinstance(exc, StoreFull):
        # Nothing was recorded; its message names the store (a path, a host): logged.
        request_id = uuid.uuid4().hex[:16]
        log.error("%s %s: %s (request %s)", request.method, request.url.path, exc, request_id)
        response = error(
            507, "store_full", f"the store has no space left (request {request_id})", None
        )
        response.headers["X-Request-Id"] = request_id
        return response
    if isinstance(exc, RunHeldElsewhere):
        response = error(503, "run_held", str(exc))
        response.headers["Retry-After"] = "1"
        return response
    status, kind = {
        UnknownRun: (404, "unknown_run"),
        RunExists: (409, "run_exists"),
        RunNotResumable: (409, "run_finished"),
        RunNotRetryable: (409, "run_not_failed"),
        RunBusy: (409, "run_busy"),
        BudgetSpent: (409, "budget_spent"),
        BadInput: (422, "bad_input"),
        ModelNotConfigured: (422, "model_not_configured"),
        BadFork: (422, "bad_fork"),
        BadTlog: (422, "bad_tlog"),
        ImportConflict: (409, "import_conflict"),
        CannotExport: (422, "cannot_export"),
        UnknownSeq: (404, "unknown_seq"),
        CannotUpgrade: (422, "cannot_upgrade"),
        BadRunId: (400, "bad_run_id"),
        UnknownAgent: (422, "unknown_agent"),
        BadSchedule: (422, "bad_schedule"),
        BadLimit: (422, "bad_limit"),
        UnknownLimit: (404, "unknown_limit"),
        ScheduleExists: (409, "schedule_exists"),
        UnknownSchedule: (404, "unknown_schedule"),
        CorruptRecord: (500, "corrupt_record"),
    }.get(type(exc), (500, "internal"))
    if status == 500:
        # The message may name paths or hosts: it goes to the log, not to the caller.
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error(status, kind, f"internal error ({type(exc).__name__}); see the server log")
    return error(status, kind, str(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error(exc.status_code, "http", str(exc.detail))


async def _client_gone(request: Request, exc: Exception) -> Response:
    # The peer went away mid-body, or was cut for sending it too slowly: no one to answer,
    # and nothing to log a traceback for.
    return Response(status_code=400, headers={"Connection": "close"})


def exception_handlers() -> dict[Any, Any]:
    return {
        BadRequest: _bad_request,
        TetherError: _tether_error,
        HTTPException: _http_error,
        ClientDisconnect: _client_gone,
    }


def routes() -> list[BaseRoute]:
    return [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_text, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/v1/runs", start_run, methods=["POST"]),
        Route("/v1/runs", list_runs, methods=["GET"]),
        Route("/v1/runs/import", import_tlog, methods=["POST"]),
        Route("/v1/runs/{run_id}", get_run, methods=["GET"]),
        Route("/v1/runs/{run_id}/events", run_events, methods=["GET"]),
        Route("/v1/runs/{run_id}/cancel", cancel_run, methods=["POST"]),
        Route("/v1/runs/{run_id}/resume", resume_run, methods=["POST"]),
        Route("/v1/runs/{run_id}/retry", retry_run, methods=["POST"]),
        Route("/v1/runs/{run_id}/fork", fork_run, methods=["POST"]),
        Route("/v1/runs/{run_id}/export", export_tlog, methods=["GET"]),
        Route("/v1/runs/{run_id}/upgrade", upgrade_run, methods=["POST"]),
        Route("/v1/workers", list_workers, methods=["GET"]),
        Route("/v1/limits", list_limits, methods=["GET"]),
        Route("/v1/limits", put_limit, methods=["PUT"]),
        Route("/v1/limits", delete_limit, methods=["DELETE"]),
        Route("/v1/schedules", list_schedules, methods=["GET"]),
        Route("/v1/schedules", add_schedule, methods=["POST"]),
        Route("/v1/schedules/{name}", remove_schedule, methods=["DELETE"]),
        Route("/v1/runs/{run_id}/signals/{key}", signal_run, methods=["POST"]),
        Route("/v1/blobs/{sha256}", get_blob, methods=["GET"]),
        Route("/", console_page, methods=["GET"]),
        Route("/favicon.svg", favicon, methods=["GET"]),
        Route("/favicon.ico", favicon, methods=["GET"]),
        Route("/runs/{run_id}", run_page, methods=["GET"]),
        # What the page reads, under the page's path so its session cookie reaches it.
        Route("/runs/{run_id}/events", run_events, methods=["GET"]),
        Route("/runs/{run_id}/children", run_children, methods=["GET"]),
        Route("/runs/{run_id}/view", run_page_view, methods=["GET"]),
        Route("/runs/{run_id}/blobs/{sha256}", get_blob, methods=["GET"]),
    ]

"""OpenTelemetry traces (the `otel` extra): a run is a trace, each recorded node a span.

The trace id is derived from the run id, and so is the run's root span id, so every
process that works on a run (a worker that is killed, the one that resumes it) adds its
spans to the same trace without passing anything along. Node spans are made from the
records as they are published, with the times the records carry: only a recorded node
is a span, once, and the hot path pays one listener call per record. Model calls are
live spans under their node's span (whose id is derived from run, node and attempt),
named and tagged after the OpenTelemetry GenAI semantic conventions.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, assert_never

from tether.foundation.errors import TetherError
from tether.foundation.status import Status

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from tether._proto.tether.v1 import records_pb2 as pb
    from tether.foundation.bodies import Body

# (trace id, span id) the next span gets; see _DerivedIds.
_IDS: ContextVar[tuple[int, int] | None] = ContextVar("tether_span_ids", default=None)


def trace_id_of(run_id: str) -> int:
    """The 128-bit trace id of a run: the same on every process, before and after a crash."""
    return int.from_bytes(hashlib.sha256(b"tether trace " + run_id.encode()).digest()[:16]) or 1


def span_id_of(run_id: str, node_id: str = "", attempt: int = 0) -> int:
    """The 64-bit span id of a run's root span (no node) or of a node attempt's span."""
    key = f"tether span {run_id}\0{node_id}\0{attempt}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8]) or 1


def _ns(us: int) -> int:
    return us * 1000


class Tracing:
    """Spans for the records of runs, and model-call spans, on one tracer."""

    def __init__(self, provider: TracerProvider | None = None) -> None:
        try:
            from opentelemetry import trace
        except ImportError as exc:  # the extra is not installed
            raise ImportError("traces need `pip install 'tether[otel]'`") from exc
        self.tracer: Tracer = trace.get_tracer("tether", tracer_provider=provider)
        self._parents: dict[tuple[str, str, int], Any] = {}
        generator = getattr(self.tracer, "id_generator", None)
        if generator is not None:  # the SDK's tracer: let chosen spans take derived ids
            self.tracer.id_generator = _DerivedIds(generator)  # type: ignore[attr-defined]

    def _parent(self, run_id: str, node_id: str = "", attempt: int = 0) -> Any:
        """The context of a span made elsewhere (or never): a run's root, a node attempt's."""
        key = (run_id, node_id, attempt)
        found = self._parents.get(key)
        if found is None:
            from opentelemetry import trace
            from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

            context = SpanContext(
                trace_id_of(run_id),
                span_id_of(run_id, node_id, attempt),
                is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
            if len(self._parents) > 4096:  # runs come and go: keep the recent ones only
                self._parents.clear()
            found = self._parents[key] = trace.set_span_in_context(NonRecordingSpan(context))
        return found

    def _span(
        self,
        name: str,
        run_id: str,
        start_us: int,
        end_us: int,
        attributes: dict[str, Any],
        *,
        ids: tuple[str, int] | None = None,
        error: str = "",
    ) -> None:
        """One finished span: a child of the run's root span, or (ids=None, root) the root."""
        from opentelemetry.trace import Status, StatusCode

        root = ids is None
        node_id, attempt = ids or ("", 0)
        token = _IDS.set((trace_id_of(run_id), span_id_of(run_id, node_id, attempt)))
        try:
            span = self.tracer.start_span(
                name,
                context=None if root else self._parent(run_id),
                start_time=_ns(start_us),
                attributes=attributes,
            )
        finally:
            _IDS.reset(token)
        if error:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=_ns(max(end_us, start_us)))

    def on_record(
        self, run_id: str, record: pb.Record, started_us: Callable[[str], int | None]
    ) -> None:
        """A published record: a node span, a failed attempt's span, or the run's root span."""
        body: Body | None = record.WhichOneof("body")
        match body:
            case "node_completed":
                node = record.node_completed
                # records.attempt_of and started_at_us_of, a layer above this one.
                attempt = node.attempt or 1
                start = node.finished_at_us - node.took_us if node.took_us else node.started_at_us
                attributes = {
                    "tether.run.id": run_id,
                    "tether.node.id": node.node_id,
                    "tether.node.kind": node.kind,
                    "tether.node.attempt": attempt,
                    "tether.node.outcome": "completed",
                    "tether.tokens.input": node.used.tokens_in,
                    "tether.tokens.output": node.used.tokens_out,
                    "tether.cost_usd": node.used.cost,
                }
                start, end = start or record.at_us, node.finished_at_us
                self._span(f"node {node.kind}", run_id, start, end or record.at_us, attributes,
                           ids=(node.node_id, attempt))  # fmt: skip
            case "node_failed":
                failed = record.node_failed
                attributes = {
                    "tether.run.id": run_id,
                    "tether.node.id": failed.node_id,
                    "tether.node.kind": failed.kind,
                    "tether.node.attempt": failed.attempt,
                    "tether.node.outcome": "failed",
                    "error.type": failed.error_type,
                }
                self._span(f"node {failed.kind}", run_id, record.at_us, record.at_us, attributes,
                           ids=(failed.node_id, failed.attempt), error=failed.message)  # fmt: skip
            case "run_finished":
                finished = record.run_finished
                status = Status.from_pb(finished.status).value
                start = started_us(run_id) or record.at_us
                self._span("run", run_id, start, record.at_us,
                           {"tether.run.id": run_id, "tether.run.status": status},
                           error=finished.error if status != "succeeded" else "")  # fmt: skip
            case "run_started" | "run_paused" | "run_resumed" | "run_waiting" | "step_recorded":
                pass  # a run's segments are the spans of its nodes; its root ends it
            case None:
                pass
            case never:
                assert_never(never)

    @contextlib.contextmanager
    def model_call(
        self, run_id: str, node_id: str, attempt: int, model: str
    ) -> Iterator[Callable[[int, int, float], None]]:
        """A live GenAI span around one model call; call the yielded function with the
        call's (input tokens, output tokens, cost) once they are known."""
        provider, _, name = model.partition(":")
        span: Span = self.tracer.start_span(
            f"chat {name or model}",
            context=self._parent(run_id, node_id, attempt),
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": provider,
                "gen_ai.system": provider,
                "gen_ai.request.model": name or model,
                "tether.run.id": run_id,
                "tether.node.id": node_id,
            },
        )

        def usage(tokens_in: int, tokens_out: int, cost: float) -> None:
            span.set_attribute("gen_ai.usage.input_tokens", tokens_in)
            span.set_attribute("gen_ai.usage.output_tokens", tokens_out)
            span.set_attribute("tether.cost_usd", cost)

        try:
            yield usage
        except BaseException as exc:
            from opentelemetry.trace import Status, StatusCode

            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(Status(StatusCode.ERROR, str(exc)))
            raise
        finally:
            span.end()


class _DerivedIds:
    """The SDK's id generator, except for spans `_span` asks a derived id for."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def generate_trace_id(self) -> int:
        ids = _IDS.get()
        return ids[0] if ids is not None else int(self._inner.generate_trace_id())

    def generate_span_id(self) -> int:
        ids = _IDS.get()
        return ids[1] if ids is not None else int(self._inner.generate_span_id())

    def is_trace_id_random(self) -> bool:
        # Derived trace ids are hashes: as good as random to a sampler.
        return bool(getattr(self._inner, "is_trace_id_random", lambda: True)())


# The process's tracing, once enabled; hooks read it and do nothing while it is None.
active: Tracing | None = None


def enable(provider: TracerProvider | None = None) -> Tracing:
    """Trace runs in this process on `provider` (default: the global one)."""
    global active
    active = Tracing(provider)
    return active


def disable() -> None:
    global active
    active = None


def enable_exporter(exporter_name: str, *, disabled: bool = False) -> Tracing | None:
    """With the `otel` extra and an exporter named (OTEL_TRACES_EXPORTER: otlp or console;
    `Settings.traces_exporter`), install an SDK tracer provider configured by the standard
    OTEL_* variables (the SDK reads them) and trace on it. Not when `disabled`
    (OTEL_SDK_DISABLED)."""
    exporter_name = exporter_name.strip().lower()
    if not exporter_name or exporter_name == "none" or disabled:
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
    except ImportError:
        raise TetherError(
            f"OTEL_TRACES_EXPORTER={exporter_name}: traces need `pip install 'tether[otel]'`"
        ) from None
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    exporter: Any
    if exporter_name == "console":
        exporter = ConsoleSpanExporter()
    elif exporter_name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # reads OTEL_EXPORTER_OTLP_* itself
    else:
        raise TetherError(
            f"OTEL_TRACES_EXPORTER={exporter_name!r}: tether sets up otlp or console "
            "(or configure a tracer provider yourself)"
        )
    provider = TracerProvider(resource=Resource.create())  # OTEL_SERVICE_NAME, ..._ATTRIBUTES
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return enable(provider)

"""Prometheus metrics (the `metrics` extra): one registry per process, fed by hooks.

Nothing is measured until `enable()` (what `tether serve` and `tether worker
--metrics-port` call): until then every hook is one global read that finds None, so the
hot path pays nothing for metrics it does not export. Names follow Prometheus'
conventions: `tether_` prefix, base units (`_seconds`, `_bytes`), `_total` on counters.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, assert_never

from tether.foundation.errors import TetherError
from tether.foundation.status import Status

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from tether._proto.tether.v1 import records_pb2 as pb
    from tether.foundation.bodies import Body

log = logging.getLogger("tether.foundation.metrics")

# Seconds: from a sub-millisecond append to a model turn of minutes.
_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
)


# Node kinds count under their own label only once declared (`declare_kinds`: the kinds of
# every registry in the process when it starts serving); any other kind a record names (an
# agent made up at run time from a model's words) counts as `other`, so no agent can grow
# the metrics' cardinality without bound.
OTHER_KIND = "other"


class Metrics:
    """Every tether metric, registered in one `CollectorRegistry`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        except ImportError as exc:  # the extra is not installed
            raise ImportError("metrics need `pip install 'tether[metrics]'`") from exc
        r = self.registry = registry or CollectorRegistry()
        self._children: dict[tuple[int, str], Any] = {}
        self.kinds: frozenset[str] = frozenset()
        self.runs = Gauge(
            "tether_runs", "Runs in the store by status (sampled).", ["status"], registry=r
        )
        self.runs_started = Counter(
            "tether_runs_started", "Runs started (sub-agent runs too).", registry=r
        )
        self.runs_finished = Counter(
            "tether_runs_finished", "Runs finished, by status.", ["status"], registry=r
        )
        self.node_seconds = Histogram(
            "tether_node_duration_seconds",
            "Time a node's handler ran, by node kind.",
            ["kind"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.nodes_failed = Counter(
            "tether_nodes_failed", "Node attempts that failed, by kind.", ["kind"], registry=r
        )
        self.append_seconds = Histogram(
            "tether_append_duration_seconds",
            "Time of a durable log append, by record kind.",
            ["kind"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.appends = Counter("tether_appends", "Records appended, by kind.", ["kind"], registry=r)
        self.append_errors = Counter(
            "tether_append_errors", "Appends refused or failed, by error.", ["error"], registry=r
        )
        self.fenced_appends = Counter(
            "tether_fenced_appends", "Appends refused because the lease epoch moved on.", registry=r
        )
        self.claims = Counter("tether_claims", "Runs claimed by workers.", registry=r)
        self.lease_renewals = Counter("tether_lease_renewals", "Leases renewed.", registry=r)
        self.leases_lost = Counter(
            "tether_leases_lost",
            "Leases lost (taken over) or expired unrenewed.",
            ["why"],
            registry=r,
        )
        self.drains = Counter("tether_drains", "Runs paused by a drain (SIGTERM).", registry=r)
        self.blob_written = Counter(
            "tether_blob_written_bytes", "Bytes put in the blob store.", registry=r
        )
        self.blob_read = Counter(
            "tether_blob_read_bytes", "Bytes read from the blob store.", registry=r
        )
        self.model_tokens = Counter(
            "tether_model_tokens",
            "Model tokens, by model and direction.",
            ["model", "direction"],
            registry=r,
        )
        self.model_cost = Counter(
            "tether_model_cost_usd", "Model cost in USD, by model.", ["model"], registry=r
        )
        self.sse_streams = Gauge("tether_sse_streams_active", "Event streams open.", registry=r)

    # -- hooks ----------------------------------------------------------------------

    def on_record(self, run_id: str, seq: int, record: pb.Record) -> None:
        """A runtime listener: counts runs and nodes from the records as they are published."""
        body: Body | None = record.WhichOneof("body")
        match body:
            case "node_completed":
                node = record.node_completed
                if node.took_us > 0:  # a slim record (records.started_at_us_of)
                    self._child(self.node_seconds, self.kind_label(node.kind)).observe(
                        node.took_us / 1e6
                    )
                elif node.finished_at_us >= node.started_at_us > 0:
                    took = (node.finished_at_us - node.started_at_us) / 1e6
                    self._child(self.node_seconds, self.kind_label(node.kind)).observe(took)
            case "node_failed":
                self._child(self.nodes_failed, self.kind_label(record.node_failed.kind)).inc()
            case "run_started":
                self.runs_started.inc()
            case "run_finished":
                status = Status.from_pb(record.run_finished.status)
                self.runs_finished.labels(status.value).inc()
            case "run_paused" | "run_resumed" | "run_waiting" | "step_recorded" | None:
                pass
            case never:
                assert_never(never)

    def declare_kinds(self, kinds: Iterable[str]) -> None:
        """Node kinds that count under their own label from now on."""
        self.kinds = self.kinds | frozenset(kinds)

    def kind_label(self, kind: str) -> str:
        """The label a node kind is counted under: itself if declared, else `other`."""
        return kind if kind in self.kinds else OTHER_KIND

    def appended(self, kind: str, records: int, seconds: float) -> None:
        self._child(self.append_seconds, kind).observe(seconds)
        self._child(self.appends, kind).inc(records)

    def _child(self, metric: Any, label: str) -> Any:
        """`metric.labels(label)`, cached: labels() takes a lock and builds a key each call."""
        key = (id(metric), label)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(label)
        return child

    def append_failed(self, exc: BaseException) -> None:
        from tether.foundation.errors import StaleEpoch

        self.append_errors.labels(type(exc).__name__).inc()
        if isinstance(exc, StaleEpoch):
            self.fenced_appends.inc()

    def worker_event(self, what: str, n: int) -> None:
        """A worker's counter moved (`Worker.statistics()` names)."""
        match what:
            case "claimed":
                self.claims.inc(n)
            case "lost" | "expired":
                self.leases_lost.labels(what).inc(n)
            case "drained":
                self.drains.inc(n)

    def model_call(self, model: str, tokens_in: int, tokens_out: int, cost: float) -> None:
        self.model_tokens.labels(model, "input").inc(tokens_in)
        self.model_tokens.labels(model, "output").inc(tokens_out)
        self.model_cost.labels(model).inc(cost)

    async def sample_runs(
        self, count_by_status: Callable[[], Awaitable[Mapping[Status, int]]], every: float
    ) -> None:
        """Set the runs gauge from the store every `every` seconds, until cancelled."""
        from tether.foundation.status import Status

        while True:
            try:
                counts = await count_by_status()
            except TetherError as exc:  # the store is away: keep the last sample
                log.warning("metrics: could not count runs (%s)", exc)
            else:
                for status in Status:
                    self.runs.labels(status.value).set(counts.get(status, 0))
            await asyncio.sleep(every)

    def track_streams(self, open_streams: Callable[[], float]) -> None:
        """Report the open event streams from a function read at each scrape."""
        self.sse_streams.set_function(open_streams)

    def exposition(self) -> tuple[bytes, str]:
        """(body, content type) of a scrape in the text format."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def serve(self, host: str, port: int) -> Any:
        """Serve `/metrics` on a thread of its own (a worker has no HTTP server); returns
        the server, whose `server_port` is the port (given 0, a free one)."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server


# The process's metrics, once enabled; hooks read it and do nothing while it is None.
active: Metrics | None = None


def enable() -> Metrics:
    """Start measuring in this process (idempotent); ImportError without the extra."""
    global active
    if active is None:
        active = Metrics()
    return active

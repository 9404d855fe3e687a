"""What a handler can reach while it runs: inputs, parents' outputs, blobs, keys, sub-agents."""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tether.blobs import BlobError, BlobReader, BlobRef, BlobStore
from tether.engine.steps import StepJournal
from tether.foundation.core import NOTHING_USED, Budget, Event, Node, NodeResult, Retry, Usage
from tether.model.values import ref_of
from tether.model.waits import event_of

if TYPE_CHECKING:
    from tether.engine.executor import RunExecutor
    from tether.engine.registry import Registry
    from tether.store import Store


class Context:
    """The context of one attempt of one node."""

    def __init__(self, run: RunExecutor, node: Node) -> None:
        self._run = run
        self.node = node
        self.usage = NOTHING_USED
        # Blobs attached by this attempt; listed in the node's record when it completes.
        self.attachments: list[BlobRef] = []
        # Made by the first ctx.step: most handlers take no steps.
        self.journal: StepJournal | None = None
        # Seconds this attempt's model calls waited for shared rate limits (its record's
        # `used.rate_wait_ms`).
        self.rate_wait_s = 0.0

    @property
    def run_id(self) -> str:
        return self._run.graph.run_id

    @property
    def node_id(self) -> str:
        return self.node.node_id

    @property
    def store(self) -> Store:
        """The store the run is recorded in (shared model rate limits live there too)."""
        return self._run.runtime.store

    @property
    def attempt(self) -> int:
        return self.node.attempt

    @property
    def idempotency_key(self) -> str:
        """`run_id:node_id`: the same on every attempt, so side effects can be deduplicated."""
        return f"{self.run_id}:{self.node.node_id}"

    async def run_input(self) -> Any:
        """The input the run was started with."""
        started = self._run.graph.started
        assert started is not None
        return await self._run.codec.decode_cached("\0input", started.input)

    async def output_of(self, node_id: str) -> Any:
        """The recorded output of a completed node of this run."""
        done = self._run.graph.completed(node_id)
        if done is None:
            raise KeyError(f"node {node_id} of run {self.run_id} is not recorded")
        return await self._run.codec.decode_cached(node_id, done.output)

    async def event(self, key: str) -> Event:
        """How wait `key` of this run completed: its event's payload, or timed out."""
        return await event_of(self._run.graph, key, self._run.codec)

    def kind_of(self, node_id: str) -> str:
        """The kind of any node of this run."""
        return self._run.graph.spec(node_id).kind

    def parents_of(self, node_id: str) -> tuple[str, ...]:
        """The parent ids of any node of this run."""
        return self._run.graph.parents_of(node_id)

    async def parent_outputs(self) -> dict[str, Any]:
        """The outputs of this node's parents, by node id."""
        return {p: await self.output_of(p) for p in self.node.parent_ids}

    # -- blobs -------------------------------------------------------------------

    @property
    def blobs(self) -> BlobStore:
        """The run's blob store (BlobError if the runtime has none)."""
        blobs = self._run.codec.blobs  # the run's view: sealed under its own key, if any
        if blobs is None:
            raise BlobError(
                f"node {self.node_id} of run {self.run_id} needs a blob store and none is "
                "configured: pass Runtime(blobs=...), or set TETHER_BLOB_URL / --blobs"
            )
        return blobs

    async def attach(
        self,
        data: bytes | AsyncIterable[bytes],
        media_type: str = "application/octet-stream",
    ) -> BlobRef:
        """Store a file (bytes, or an async stream of chunks) and list it in this node's record.

        The blob is durable when this returns, before the record that points to it is
        appended. If the node is not recorded (crash, failed attempt), the blob is an
        orphan that `tether blobs gc` removes; a re-run of the node stores it again.
        """
        ref = await self.blobs.put(data, media_type)
        self.attachments.append(ref)
        return ref

    def attachments_of(self, node_id: str) -> list[BlobRef]:
        """The blobs a completed node of this run attached."""
        done = self._run.graph.completed(node_id)
        if done is None:
            raise KeyError(f"node {node_id} of run {self.run_id} is not recorded")
        return [ref_of(b) for b in done.blobs]

    async def read_blob(self, ref: BlobRef) -> bytes:
        """A whole blob, checked against the ref's size and sha256."""
        return await self.blobs.get(ref)

    def open_blob(self, ref: BlobRef) -> BlobReader:
        """Stream a blob's chunks (`async with ctx.open_blob(ref) as chunks: ...`)."""
        return self.blobs.open(ref)

    # -- journaled steps -----------------------------------------------------------

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: Retry | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """Run `fn(*args)` (sync or async) as a journaled step and return its result.

        The result is recorded (as JSON; large ones in the blob store) before this returns.
        When this node runs again after a crash, a drain or a failed attempt, a step
        already recorded at this position returns its recorded result without running;
        a different `name` there raises NonDeterministicStep and pauses the run. `fn` may
        return `StepResult(output, usage)` to count tokens and cost against the budget.
        `retry` and `timeout_s` apply to this step alone; budgets are checked before it.
        """
        if self.journal is None:
            self.journal = StepJournal(self._run, self.node.node_id)
        return await self.journal.step(name, fn, args, retry=retry, timeout_s=timeout_s)

    # -- graph -------------------------------------------------------------------

    def add_usage(self, usage: Usage) -> None:
        """Count tokens and cost against the run's budget when this node is recorded."""
        self.usage = self.usage + usage

    def emit(self, event: dict[str, Any]) -> None:
        """Send a non-durable event (e.g. model tokens) to in-process listeners; never logged."""
        self._run.runtime.events.emit(self.run_id, self.node.node_id, event)

    async def run_child(
        self,
        agent: Registry | str,
        input: Any = None,
        *,
        key: str = "",
        budget: Budget | None = None,
    ) -> Any:
        """Run `agent` as a sub-agent child run and return its result.

        The child's run id derives from this run and node, so a resumed parent resumes
        the child from its own log instead of starting it again.
        """
        result, usage = await self._run.runtime.run_child(
            self._run, self.node.node_id, agent, input, key=key, budget=budget
        )
        self.add_usage(usage)
        return result


# A node's handler, and a fallback that runs once its retries are spent (`Registry.node`).
Handler = Callable[[Context, Node], Awaitable["NodeResult | Any"]]
Fallback = Callable[[Context, Node, BaseException], Awaitable["NodeResult | Any"]]

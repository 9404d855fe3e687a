"""Concurrency limits: how many runs of an agent, or of its keys, execute at once.

A run may carry a concurrency key (a tenant, a user) and a priority. A limit caps the runs
executing at once of an agent as a whole, of one of its keys, or of each of its keys (a
key's own limit wins over the each-key one). A slot is held by a running run whose lease
is live: a crashed worker's run frees its slot when its lease runs out.

The claim's rule, the same on every backend (the SQL stores write it as one statement,
`claim_order` below is it for the memory store): runnable runs go in order of priority
(highest first) and, within a priority, in turns over the keys: the first run of every
key, then the second of every key, ... (a key's live slots count as turns it has had, and
within one turn the key served longest ago goes first), so a key with 10,000 queued runs
does not starve one with 10, even one slot at a time. A key's n-th runnable run (in
that order) may start while n plus its key's held slots is within the key's limit, and
likewise for its agent's limit; runs that may not start are passed over, never waited for,
so a saturated key holds no other key back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tether.foundation.errors import BadLimit
from tether.store.base import RunInfo, Status

MAX_KEY = 200
NO_KEY = ""  # how the tables spell a run without a key


def check_key(key: str | None) -> str:
    """A run's concurrency key as stored ('' for none); BadLimit if it is not a short text."""
    if key is None:
        return NO_KEY
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY or not key.isprintable():
        raise BadLimit(f"concurrency key {key!r}: give 1 to {MAX_KEY} printable characters")
    return key


def check_priority(priority: int) -> int:
    """A run's priority (higher is claimed first); BadLimit if it is not a small integer."""
    if isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) >= 2**31:
        raise BadLimit(f"priority {priority!r}: give an integer (higher runs first; default 0)")
    return priority


@dataclass(frozen=True, slots=True)
class ConcurrencyLimit:
    """At most `max_running` runs of `agent` at once: of key `key`, of each of its keys
    (`each_key`), or of the agent as a whole (neither)."""

    agent: str
    max_running: int
    key: str | None = None
    each_key: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.agent, str) or not 1 <= len(self.agent) <= MAX_KEY:
            raise BadLimit(f"concurrency limit: agent {self.agent!r} is not an agent name")
        if self.key is not None:
            check_key(self.key)
            if self.each_key:
                raise BadLimit(
                    f"concurrency limit of {self.agent!r}: give a key (--key) or --each-key, "
                    "not both"
                )
        n = self.max_running
        if isinstance(n, bool) or not isinstance(n, int) or not 0 < n < 2**31:
            raise BadLimit(
                f"concurrency limit of {self.scope}: max running must be 1 or more, not {n!r}"
            )

    @property
    def scope(self) -> str:
        """`agent A`, `key K of agent A`, `each key of agent A`."""
        if self.key is not None:
            return f"key {self.key} of agent {self.agent}"
        return f"each key of agent {self.agent}" if self.each_key else f"agent {self.agent}"

    @property
    def stored_key(self) -> str:
        return self.key if self.key is not None else NO_KEY


def limit_of(row: Sequence[object]) -> ConcurrencyLimit:
    """A limit from a `run_limits` row (agent, concurrency_key, each_key, max_running)."""
    agent, key, each, n = row[0], row[1], row[2], row[3]
    assert isinstance(agent, str) and isinstance(key, str) and isinstance(n, int)
    return ConcurrencyLimit(agent, n, key or None, bool(each))


@dataclass(frozen=True, slots=True)
class Limits:
    """The stored limits, looked up as the claim does."""

    rows: Sequence[ConcurrencyLimit]

    def of_key(self, agent: str, key: str) -> int | None:
        """The limit on the runs of `agent` with `key` (a run without a key has none)."""
        if key == NO_KEY:
            return None
        each = None
        for lim in self.rows:
            if lim.agent == agent and lim.key == key:
                return lim.max_running
            if lim.agent == agent and lim.each_key:
                each = lim.max_running
        return each

    def of_agent(self, agent: str) -> int | None:
        for lim in self.rows:
            if lim.agent == agent and lim.key is None and not lim.each_key:
                return lim.max_running
        return None


@dataclass(frozen=True, slots=True)
class Candidate:
    """A runnable run as the claim ranks it."""

    run_id: str
    agent: str
    key: str
    priority: int
    created_at: float


def claim_order(
    candidates: Iterable[Candidate],
    held: Mapping[tuple[str, str], int],
    limits: Limits,
    served_at: Mapping[str, float],
) -> list[Candidate]:
    """The runs that may start, in the order the claim takes them (see the module's rule);
    `held` counts the live slots by (agent, key), `served_at` says when each key was last
    served (its latest run taken or finished; a key never served has none)."""

    def order(ct: tuple[Candidate, int]) -> tuple[int, int, bool, float, float, str]:
        c, turn = ct
        at = served_at.get(c.key)
        return (-c.priority, turn, at is not None, at or 0.0, c.created_at, c.run_id)

    by_age = sorted(candidates, key=lambda c: (-c.priority, c.created_at, c.run_id))
    turns: dict[tuple[int, str], int] = {}
    served: dict[str, int] = {}  # a key's live slots count as turns it has had
    for (_, key), n in held.items():
        served[key] = served.get(key, 0) + n
    key_n: dict[tuple[str, str], int] = {}
    ranked = []
    for c in by_age:
        turn = turns[c.priority, c.key] = turns.get((c.priority, c.key), served.get(c.key, 0)) + 1
        n = key_n[c.agent, c.key] = key_n.get((c.agent, c.key), 0) + 1
        cap = limits.of_key(c.agent, c.key)
        if cap is None or n + held.get((c.agent, c.key), 0) <= cap:
            ranked.append((c, turn))
    ranked.sort(key=order)
    running: dict[str, int] = {}
    for (agent, _), n in held.items():
        running[agent] = running.get(agent, 0) + n
    agent_n: dict[str, int] = {}
    taken = []
    for c, _ in ranked:
        cap = limits.of_agent(c.agent)
        n = agent_n[c.agent] = agent_n.get(c.agent, 0) + 1
        if cap is None or n + running.get(c.agent, 0) <= cap:
            taken.append(c)
    return taken


def why_waiting(limits: Limits, agent: str, key: str, held: Mapping[str, int]) -> str | None:
    """Why a runnable run of `agent` with `key` is not claimed, given its agent's live slots
    by key (`held`): `key A at its limit 2`, `agent X at its limit 3`; None if nothing holds
    it back."""
    cap = limits.of_key(agent, key)
    if cap is not None and held.get(key, 0) >= cap:
        return f"key {key} at its limit {cap}"
    cap = limits.of_agent(agent)
    if cap is not None and sum(held.values()) >= cap:
        return f"agent {agent} at its limit {cap}"
    return None


class ConcurrencyLimits(ABC):
    """The stored concurrency limits (what claims enforce) and the slots held."""

    @abstractmethod
    async def set(self, limit: ConcurrencyLimit, *, only_if_missing: bool = False) -> None:
        """Store a limit (replacing the one of the same scope); with `only_if_missing`, one
        already stored wins (how limits given in code act as defaults)."""

    @abstractmethod
    async def remove(self, agent: str, key: str | None = None, *, each_key: bool = False) -> bool:
        """Lift the limit of that scope (runs waiting for it are claimable at once); False if
        there was none."""

    @abstractmethod
    async def all(self) -> list[ConcurrencyLimit]:
        """Every stored limit, by agent, then scope."""

    @abstractmethod
    async def held(self, agent: str) -> dict[str, int]:
        """The live slots of `agent` (running runs under a live lease), by key."""

    async def waiting(self, rows: Sequence[RunInfo]) -> dict[str, str]:
        """`waiting: key A at its limit 2` for each queued top-level run of `rows` that a
        limit holds back, by run id (one read of the limits, one of each agent's slots)."""
        queued = [r for r in rows if r.status is Status.QUEUED and r.parent_run_id is None]
        stored = await self.all() if queued else []
        reasons: dict[str, str] = {}
        held: dict[str, dict[str, int]] = {}
        for r in queued:
            limits = Limits([m for m in stored if m.agent == r.agent])
            if not limits.rows:
                continue
            if r.agent not in held:
                held[r.agent] = await self.held(r.agent)
            why = why_waiting(limits, r.agent, r.key or NO_KEY, held[r.agent])
            if why is not None:
                reasons[r.run_id] = f"waiting: {why}"
        return reasons

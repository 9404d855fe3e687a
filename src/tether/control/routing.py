"""Which runs a worker may claim: the versions its code serves (pinning), and the runs of
other versions its code checked it can continue (`compatible=`).

The claim statement filters on versions (`Serves`), so a run whose version no live worker
serves is never claimed (its epoch does not move) and waits queued. A `compatible=` list or
function cannot be evaluated by the database, so before claiming, the worker reads the
runnable runs its versions leave out (`Leases.stranded`, no claim, no epoch), loads each
one's log and asks `tether.engine.continuity.check_run` (handlers for every pending kind, pending
inputs that fit, the version listed or the function saying yes). The runs that pass are
named in the next claim (`Serves.also`), which takes them only if still runnable; the
others are not looked at again for `RECHECK_AFTER` seconds. Agents of runs that this
process has not resolved yet are resolved on the way (an agent that does not import here
is tried again after `RECHECK_AFTER`), unless the worker is pinned to its agents (`pin`, as
`tether serve`'s embedded worker is): then it claims and resolves no other agent's runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from tether.engine.continuity import check_run
from tether.engine.registry import Registry, resolve_agent
from tether.engine.runtime import Runtime
from tether.foundation.errors import StoreUnavailable, TetherError, UnknownAgent
from tether.store.base import Serves
from tether.store.workers import Served

log = logging.getLogger("tether.control.worker")

# How long a run this code cannot continue, or an agent that does not resolve here, is left
# alone before it is looked at again.
RECHECK_AFTER = 60.0


def pinned(agents: Iterable[str]) -> dict[str, Registry]:
    """The registries of `agents` by every name a run of theirs may be recorded under: the
    name given (`pkg.mod:agent`, an entry point) and the registry's own name (a run started
    with the Registry object). A name that does not resolve is left out (not served)."""
    out: dict[str, Registry] = {}
    for name in agents:
        try:
            registry = resolve_agent(name)
        except UnknownAgent as exc:
            log.warning("agent %r does not resolve here (%s); not serving it", name, exc)
            continue
        out.setdefault(registry.name, registry)
        out[name] = registry
    return out


class Routing:
    """The agents a worker serves, by the name runs were submitted under, and its verdicts
    on runs of other versions."""

    def __init__(self, runtime: Runtime, agents: Iterable[str] = ()) -> None:
        self.runtime = runtime
        self.agents: dict[str, Registry] = {}
        # Agent names that did not resolve here, and run ids this code cannot continue,
        # with when that was found (monotonic).
        self._unresolved: dict[str, float] = {}
        self._rejected: dict[str, float] = {}
        # Runs of other versions that passed the check: named in the next claim.
        self.accepted: list[str] = []
        # Set when an agent is resolved: the worker advertises what it serves at once.
        self.changed = False
        # False once pinned: a run of an agent not listed is never resolved (importing a
        # module runs its code) nor claimed here.
        self.dynamic = True
        for name in agents:
            self.agents[name] = resolve_agent(name)

    def pin(self, agents: Iterable[str]) -> None:
        """Serve exactly `agents` from now on (resolved now): runs naming any other agent
        are left to other workers, whatever their rows or records say."""
        self.agents = pinned(agents)
        self.dynamic = False
        self.changed = True

    def serves(self) -> Serves:
        return Serves({name: r.version for name, r in self.agents.items()}, tuple(self.accepted))

    def advert(self) -> dict[str, Served]:
        """What this worker advertises in the workers table."""
        return {
            name: Served(r.version, r.compatible_versions, r.compatible_fn is not None)
            for name, r in self.agents.items()
        }

    def skipped(self, now: float) -> list[str]:
        for run_id, at in list(self._rejected.items()):
            if now - at >= RECHECK_AFTER:
                del self._rejected[run_id]
        return list(self._rejected)

    def reject(self, run_id: str) -> None:
        self._rejected[run_id] = time.monotonic()

    async def scan(self, skip: list[str], limit: int) -> bool:
        """Look at runnable runs the claim leaves out; True if the next claim may take more
        (an agent was resolved, or a run of another version passed the check)."""
        self.accepted = []
        now = time.monotonic()
        stranded = await self.runtime.store.leases.stranded(
            Serves({n: r.version for n, r in self.agents.items()}), skip + self.skipped(now), limit
        )
        more = False
        for run in stranded:
            registry = self.agents.get(run.agent) or self._resolve(run.agent, now)
            if registry is None:
                continue
            if run.version is None or run.version == registry.version:
                more = True  # an agent newly resolved: the claim admits its runs now
                continue
            if registry.accepts(run.version) is False:
                log.info(
                    "run %s: on version %s, which agent %r here (version %s) does not serve; "
                    "leaving it to a worker of that version",
                    run.run_id,
                    run.version,
                    run.agent,
                    registry.version,
                )
                self._rejected[run.run_id] = now
                continue
            if await self._continuable(registry, run.run_id):
                self.accepted.append(run.run_id)
                more = True
        return more

    def _resolve(self, agent: str, now: float) -> Registry | None:
        if not self.dynamic:
            return None
        at = self._unresolved.get(agent)
        if at is not None and now - at < RECHECK_AFTER:
            return None
        try:
            registry = resolve_agent(agent)
        except UnknownAgent as exc:
            log.info("agent %r does not resolve here (%s); leaving its runs", agent, exc)
            self._unresolved[agent] = now
            return None
        self._unresolved.pop(agent, None)
        self.agents[agent] = registry
        self.changed = True
        log.info("serving agent %r version %s", agent, registry.version)
        return registry

    async def _continuable(self, registry: Registry, run_id: str) -> bool:
        try:
            graph = await self.runtime.load(run_id)
            problems = await check_run(registry, graph, codec=self.runtime.new_codec())
            why = "; ".join(p.detail for p in problems)
        except StoreUnavailable:
            raise
        except TetherError as exc:  # unreadable here: leave it to a worker that can read it
            why = f"{type(exc).__name__}: {exc}"
        if why:
            log.info(
                "run %s: version %s here cannot continue it: %s", run_id, registry.version, why
            )
            self._rejected[run_id] = time.monotonic()
            return False
        return True

"""Circuit breakers per (pool, replica): a replica that keeps failing is taken out of rotation for a cool-down, then
one probe request decides whether it rejoins (docs/reliability.md).

    closed --N consecutive failures--> open --cool-down elapsed--> half-open --probe succeeds--> closed
                                        ^                              |
                                        +-------- probe fails ---------+

A failure is a connect error, a first-byte timeout, a 5xx without an error body the worker meant, or a stream that
broke or stalled mid-answer; a success is a worker that answered (headers with a status the worker meant).

A small state machine rather than a library: purgatory (asyncio) lets every concurrent caller through while
half-open and moves open -> half-open only inside a guarded call, and pybreaker is synchronous (its async path needs
Tornado). The router needs to read a breaker's state without making a call (to order candidates and export the
gauge), and exactly one probe at a time.

Across gateway replicas (`shared_by`): a breaker that opens is written to the fleet's shared control state, and every
other replica opens its own for the rest of that cool-down in its next sync round, so a dead worker is skipped by the
whole fleet after the failures one gateway saw. Each replica probes for itself after the cool-down (a probe is one
request); a replica that sees the worker answer again withdraws the record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from functions.metrics.failover import FailoverMetrics
from shared.settings import BreakerSettings
from shared.storage.control_state import ControlState

_DEFAULTS = BreakerSettings.model_construct()  # the section's defaults, without reading the environment
# The shared control state's namespace of open breakers: key "pool replica-url", value {"opened_at": unix seconds}.
OPEN_BREAKERS = "open-breakers"


class BreakerState(IntEnum):
    """The gauge's values: 0 closed, 1 half-open, 2 open."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


@dataclass
class ReplicaBreaker:
    threshold: int
    cooldown_s: float
    clock: Callable[[], float] = time.monotonic
    failures: int = 0  # consecutive, while closed
    opened_at: float | None = None
    probing: bool = False  # the one half-open probe is in flight

    @property
    def state(self) -> BreakerState:
        if self.opened_at is None:
            return BreakerState.CLOSED
        if self.clock() - self.opened_at < self.cooldown_s:
            return BreakerState.OPEN
        return BreakerState.HALF_OPEN

    @property
    def available(self) -> bool:
        """Would a request be let through now (without taking the probe)?"""
        state = self.state
        return state is BreakerState.CLOSED or (state is BreakerState.HALF_OPEN and not self.probing)

    def admit(self) -> bool:
        """Let one request through: always while closed; while half-open only the first (it is the probe)."""
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.HALF_OPEN and not self.probing:
            self.probing = True
            return True
        return False

    def succeeded(self) -> None:
        self.failures, self.opened_at, self.probing = 0, None, False

    def failed(self) -> None:
        self.probing = False
        if self.opened_at is not None:  # the probe failed (or a request admitted before it opened): a new cool-down
            self.opened_at = self.clock()
            return
        self.failures += 1
        if self.failures >= self.threshold:
            self.opened_at = self.clock()

    def released(self) -> None:
        """The admitted request ended with no verdict on the replica (the client left): free the probe."""
        self.probing = False


class ReplicaBreakers:
    """Every replica's breaker, created on first use; the gauge reads each breaker's state when scraped."""

    def __init__(
        self,
        worker_urls: dict[str, list[str]],
        *,
        threshold: int = _DEFAULTS.failure_threshold,
        cooldown_s: float = _DEFAULTS.cooldown_s,
        metrics: FailoverMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._worker_urls = worker_urls
        self._threshold, self._cooldown_s, self._clock = threshold, cooldown_s, clock
        self._metrics = metrics
        self._breakers: dict[tuple[str, str], ReplicaBreaker] = {}
        self._shared: tuple[ControlState, str, Callable[[], float]] | None = None
        self._published: dict[tuple[str, str], float] = {}  # opened_at (this clock) of each breaker written
        for pool, urls in worker_urls.items():
            for url in urls:
                self.breaker(pool, url)

    def breaker(self, pool: str, replica: str) -> ReplicaBreaker:
        key = (pool, replica)
        found = self._breakers.get(key)
        if found is None:
            found = self._breakers[key] = ReplicaBreaker(self._threshold, self._cooldown_s, self._clock)
            if self._metrics is not None:
                # The replica's index, never its URL (URLs are deployment details and unbounded label values).
                urls = self._worker_urls.get(pool, [])
                label = str(urls.index(replica)) if replica in urls else "other"
                self._metrics.breaker_state.labels(pool, label).set_function(lambda b=found: float(b.state))
        return found

    def state(self, pool: str, replica: str) -> BreakerState:
        return self.breaker(pool, replica).state

    def order(self, pool: str, replicas: Sequence[str]) -> list[str]:
        """`replicas` with the ones a breaker holds back moved last, each group in its given order: a healthy
        replica keeps its place in the consistent-hash order, so stickiness holds for every session it owns."""
        ready = [r for r in replicas if self.breaker(pool, r).available]
        held = [r for r in replicas if r not in ready]
        return ready + held

    # The fleet ------------------------------------------------------------------------------------------------------
    def shared_by(self, state: ControlState, scope: str, wall_clock: Callable[[], float] = time.time) -> None:
        """Share open breakers with the other replicas through `state` (`sync` every round); `scope` keeps these
        breakers apart from another set's (chat's and embeddings' workers)."""
        self._shared = (state, scope, wall_clock)

    async def sync(self) -> None:
        """A fleet sync step: write the breakers that opened here, withdraw those that closed, open the ones another
        replica opened for the rest of their cool-down."""
        if self._shared is None:
            return
        state, scope, wall_clock = self._shared
        namespace = f"{OPEN_BREAKERS}:{scope}"
        now, wall = self._clock(), wall_clock()
        for key, breaker in list(self._breakers.items()):
            name = f"{key[0]} {key[1]}"
            if breaker.opened_at is not None and self._published.get(key) != breaker.opened_at:
                opened_wall = wall - (now - breaker.opened_at)
                await state.put(namespace, name, {"opened_at": opened_wall}, ttl_s=self._cooldown_s)
                self._published[key] = breaker.opened_at
            elif breaker.opened_at is None and key in self._published:
                await state.delete(namespace, name)
                del self._published[key]
        for name, record in (await state.records(namespace)).items():
            pool, _, replica = name.partition(" ")
            breaker = self._breakers.get((pool, replica))
            if breaker is None:  # a replica this gateway does not route to
                continue
            opened_wall = record.get("opened_at")
            if breaker.opened_at is None and isinstance(opened_wall, int | float):
                breaker.opened_at = now - max(0.0, wall - float(opened_wall))
                self._published[(pool, replica)] = breaker.opened_at  # known to the fleet already

"""Canary model versions: which version of a pool answers a request, conversations stuck to one version, each
version's recent error rate, and the automatic rollback of a canary that errs more than the stable version
(docs/canary.md).

A pool's canary is a set of replicas serving another model version (`FLEETCHAT_CANARIES`). The version is chosen by a
hash of the session (the conversation id, or the client's `x-session-id`), so a conversation never flips between
versions; a request without a session draws at random by the weight. The canary replicas are routed like any others
(their own consistent-hash ring, under `canary_ring(pool)`), so breakers and stickiness apply to them unchanged.

Rollback: over the last `window_s`, once the canary answered `min_requests`, its error rate (5xx answers and streams
that failed) is compared with the stable version's; above it by more than `error_margin`, the canary gets no new
traffic until an operator resets it (`POST /admin/v1/canaries/{pool}/reset`). Each gateway judges on the answers it
relayed (its windows are its own: every replica sees a random share of the same traffic); a rollback is written to
the fleet's shared control state, so every replica stops sending traffic to that canary within a sync round, and it
survives a restart of every gateway (the record names the canary's version: a new canary version starts afresh). A
reset on any replica puts the canary back everywhere.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import BaseModel

from shared.errors import FleetchatError, NotFoundError
from shared.fleet.canaries import CanarySpec
from shared.fleet.pools import model_version
from shared.fleet.tables import tables
from shared.storage.control_state import ControlState

log = logging.getLogger("fleetchat.canary")

CANARY_ROLLBACKS = "fleetchat_gateway_canary_rollbacks"  # exposed as ..._total
CANARY_ANSWERS = "fleetchat_gateway_canary_answers"  # exposed as ..._total
CANARY_ACTIVE = "fleetchat_gateway_canary_active"
# The response header naming the model version that answered.
MODEL_VERSION_HEADER = "x-fleetchat-model-version"

T = TypeVar("T")

# The shared control state's namespace of rollbacks: key = pool, value = {"version": canary version, "reason": ...}.
ROLLBACKS = "canary-rollbacks"


def stable_versions(*, deployed: bool) -> dict[str, str]:
    """Each pool's stable model version, as GET /v1/models reports it."""
    return {name: model_version(pool, deployed=deployed) for name, pool in tables().pools.items()}


def canary_ring(pool: str) -> str:
    """The routing key of a pool's canary replicas (never a model clients can ask for: tiers name pools only)."""
    return f"{pool}@canary"


class CanaryMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.rollbacks = Counter(
            CANARY_ROLLBACKS, "Canary versions rolled back automatically, by pool.", ["pool"], registry=registry
        )
        self.answers = Counter(
            CANARY_ANSWERS,
            "Answers of pools that have a canary, by version (stable, canary) and outcome (ok, error).",
            ["pool", "version", "outcome"],
            registry=registry,
        )
        self.active = Gauge(
            CANARY_ACTIVE, "1 while the pool's canary takes traffic, 0 once rolled back.", ["pool"], registry=registry
        )


@dataclass(frozen=True)
class VersionChoice:
    pool: str  # the pool asked for (tiers, billing)
    ring: str  # the replicas routed to: the pool's own, or its canary's
    version: str  # the model version that answers
    canary: bool


class CanaryStatus(BaseModel):
    """One pool's canary, as the admin API shows it."""

    pool: str
    stable_version: str
    canary_version: str
    weight: float
    state: Literal["active", "rolled_back"]
    rolled_back_reason: str | None = None
    window_s: float
    stable_requests: int
    stable_errors: int
    canary_requests: int
    canary_errors: int


@dataclass
class _Window:
    """Outcomes (time, ok) of the last `window_s` seconds."""

    outcomes: deque[tuple[float, bool]] = field(default_factory=deque)

    def add(self, at: float, ok: bool) -> None:
        self.outcomes.append((at, ok))

    def prune(self, now: float, window_s: float) -> None:
        while self.outcomes and self.outcomes[0][0] <= now - window_s:
            self.outcomes.popleft()

    @property
    def requests(self) -> int:
        return len(self.outcomes)

    @property
    def errors(self) -> int:
        return sum(1 for _, ok in self.outcomes if not ok)

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.outcomes else 0.0


@dataclass
class _Canary:
    spec: CanarySpec
    stable_version: str
    stable: _Window = field(default_factory=_Window)
    canary: _Window = field(default_factory=_Window)
    rolled_back_reason: str | None = None


def _share(pool: str, session_id: str) -> float:
    """A stable point in [0, 1) for a session (salted apart from the replica ring's hash)."""
    digest = hashlib.blake2b(f"canary|{pool}|{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class Canaries:
    def __init__(
        self,
        specs: dict[str, CanarySpec],
        stable_versions: dict[str, str],
        metrics: CanaryMetrics,
        clock: Callable[[], float] = time.monotonic,
        draw: Callable[[], float] = random.random,
        *,
        shared: ControlState | None = None,
    ) -> None:
        self._pools = {pool: _Canary(spec, stable_versions.get(pool, pool)) for pool, spec in specs.items()}
        self.shared = shared
        self._unpublished: set[str] = set()  # rolled back here, not yet in the shared state
        self._stable_versions = stable_versions
        self.metrics = metrics
        self.clock = clock
        self.draw = draw
        for pool in self._pools:
            metrics.active.labels(pool).set(1)

    def worker_urls(self) -> dict[str, list[str]]:
        """The canary replicas by routing key, for the pool router."""
        return {canary_ring(pool): list(state.spec.worker_urls) for pool, state in self._pools.items()}

    def stable(self, pool: str) -> VersionChoice:
        return VersionChoice(pool, pool, self._stable_versions.get(pool, pool), canary=False)

    def choose(self, pool: str, session_id: str | None) -> VersionChoice:
        """The version answering this request: sticky by session, weighted at random without one."""
        state = self._pools.get(pool)
        stable = self.stable(pool)
        if state is None or state.rolled_back_reason is not None:
            return stable
        point = _share(pool, session_id) if session_id else self.draw()
        if point < state.spec.weight:
            return VersionChoice(pool, canary_ring(pool), state.spec.version, canary=True)
        return stable

    async def observe(self, choice: VersionChoice, answer: Awaitable[T], *, streamed: bool) -> T:
        """Await the worker's answer, recording a server-side failure (5xx) against the version; a whole answer is
        recorded as ok here, a stream when it ends (`record`). Client errors (4xx) say nothing about a version."""
        try:
            result = await answer
        except FleetchatError as exc:
            if exc.status_code >= 500:
                self.record(choice, ok=False)
            raise
        if not streamed:
            self.record(choice, ok=True)
        return result

    def record(self, choice: VersionChoice, *, ok: bool) -> None:
        state = self._pools.get(choice.pool)
        if state is None:
            return
        now = self.clock()
        (state.canary if choice.canary else state.stable).add(now, ok)
        version = "canary" if choice.canary else "stable"
        self.metrics.answers.labels(choice.pool, version, "ok" if ok else "error").inc()
        if choice.canary and state.rolled_back_reason is None:
            self._judge(choice.pool, state, now)

    def _judge(self, pool: str, state: _Canary, now: float) -> None:
        spec = state.spec
        state.stable.prune(now, spec.window_s)
        state.canary.prune(now, spec.window_s)
        if state.canary.requests < spec.min_requests:
            return
        canary_rate, stable_rate = state.canary.error_rate, state.stable.error_rate
        if canary_rate <= stable_rate + spec.error_margin:
            return
        state.rolled_back_reason = (
            f"error rate {canary_rate:.1%} over {state.canary.requests} requests against the stable version's "
            f"{stable_rate:.1%} over {state.stable.requests} (margin {spec.error_margin:.1%}, last {spec.window_s:g} s)"
        )
        self.metrics.rollbacks.labels(pool).inc()
        self.metrics.active.labels(pool).set(0)
        self._unpublished.add(pool)
        log.warning("canary %s of pool %s rolled back: %s", spec.version, pool, state.rolled_back_reason)

    async def sync(self) -> None:
        """A fleet sync step: publish this replica's rollbacks, then take the fleet's (another replica's rollback, or
        an operator's reset made elsewhere)."""
        if self.shared is None:
            return
        for pool in sorted(self._unpublished):
            state = self._pools[pool]
            if state.rolled_back_reason is not None:
                record = {"version": state.spec.version, "reason": state.rolled_back_reason}
                await self.shared.put(ROLLBACKS, pool, record)
            self._unpublished.discard(pool)
        rolled_back = await self.shared.records(ROLLBACKS)
        for pool, state in self._pools.items():
            record = rolled_back.get(pool)
            if record is not None and record.get("version") == state.spec.version:
                if state.rolled_back_reason is None:
                    state.rolled_back_reason = str(record.get("reason") or "rolled back by another gateway replica")
                    self.metrics.active.labels(pool).set(0)
                    log.warning("canary %s of pool %s rolled back by the fleet", state.spec.version, pool)
            elif state.rolled_back_reason is not None and pool not in self._unpublished:
                self._reset(pool, state)  # an operator's reset on another replica

    async def reset(self, pool: str) -> CanaryStatus:
        """An operator puts a rolled-back canary back into service (its windows start afresh), on every replica."""
        state = self._state(pool)
        if state.rolled_back_reason is not None:
            log.warning("canary %s of pool %s reset by an operator", state.spec.version, pool)
        if self.shared is not None:
            await self.shared.delete(ROLLBACKS, pool)  # first: a failure leaves it rolled back everywhere
        self._unpublished.discard(pool)
        self._reset(pool, state)
        return self.status(pool)

    def _reset(self, pool: str, state: _Canary) -> None:
        state.rolled_back_reason = None
        state.stable, state.canary = _Window(), _Window()
        self.metrics.active.labels(pool).set(1)

    def status(self, pool: str) -> CanaryStatus:
        state = self._state(pool)
        now = self.clock()
        state.stable.prune(now, state.spec.window_s)
        state.canary.prune(now, state.spec.window_s)
        return CanaryStatus(
            pool=pool,
            stable_version=state.stable_version,
            canary_version=state.spec.version,
            weight=state.spec.weight,
            state="active" if state.rolled_back_reason is None else "rolled_back",
            rolled_back_reason=state.rolled_back_reason,
            window_s=state.spec.window_s,
            stable_requests=state.stable.requests,
            stable_errors=state.stable.errors,
            canary_requests=state.canary.requests,
            canary_errors=state.canary.errors,
        )

    def statuses(self) -> list[CanaryStatus]:
        return [self.status(pool) for pool in self._pools]

    def _state(self, pool: str) -> _Canary:
        state = self._pools.get(pool)
        if state is None:
            raise NotFoundError(f"Pool '{pool}' has no canary.", param="pool")
        return state

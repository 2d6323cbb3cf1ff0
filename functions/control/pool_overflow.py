"""Where and when a chat request runs: a place in its pool (pool_admission), or overflow to the tier's next pool.

A request of an overflow tier (plus by default) that its pool cannot serve in time — the pool's expected wait for it
exceeds the tier's TTFT objective, or the tier's queue there is full — goes to the tier's next pool (flagship ->
mini), announced like any fallback (`x-fleetchat-fallback-model`, the web chat's banner); never silently. If that pool
cannot serve it in time either, it is refused with 503 `capacity_exceeded` and a `retry-after`. Other tiers wait in
their pool's queue (bounded), enterprise first.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from functions.control.brownout import BrownoutController
from functions.control.pool_admission import (
    DRAIN_RAMP_S,
    CapacityExceededError,
    Clock,
    PoolGate,
    QueueBounds,
    Slot,
    unless_disconnected,
)
from functions.metrics.control import ControlMetrics
from shared.fleet.tables import policy_for, tables
from shared.fleet.tiers import Tier
from shared.settings import BrownoutSettings, Settings
from shared.wire.schemas import ChatCompletionRequest

Receive = Callable[[], Awaitable[dict[str, Any]]]
Fallback = Callable[[], tuple[str, ChatCompletionRequest] | None]


@dataclass
class Placed:
    """Where the request runs and the place it holds there (release it when the answer ends)."""

    pool: str
    body: ChatCompletionRequest
    slot: Slot
    overflowed_from: str | None = None  # the pool asked for, when it overflowed to `pool`


def pool_capacities(settings: Settings, worker_urls: dict[str, list[str]]) -> dict[str, int]:
    """Places per pool, for the whole fleet: the setting where given; locally `pool_capacity_per_replica` per replica;
    deployed the pool table's concurrent inputs per container times its containers. Each gateway replica admits its
    share (`PoolControl.share_among`)."""
    capacities = {}
    for pool, urls in worker_urls.items():
        if pool in settings.pool.capacity:
            capacities[pool] = settings.pool.capacity[pool]
        elif settings.environment == "local" or pool not in tables().pools:
            capacities[pool] = settings.pool.capacity_per_replica * max(len(urls), 1)
        else:
            deployed = tables().pools[pool].deployed
            capacities[pool] = deployed.max_concurrent_inputs * deployed.max_containers
    return capacities


def paid_reserve(capacity: int, share: float) -> int:
    """Places kept for paid tiers: `share` of the pool, at least one where there is a share at all, and never the
    whole pool (free always has a place)."""
    if share <= 0 or capacity < 2:
        return 0
    return min(max(1, int(capacity * share)), capacity - 1)


class PoolControl:
    """The gateway's pools' gates, the overflow rule, and the brownout controller fed by their queues."""

    def __init__(
        self,
        capacities: dict[str, int],
        bounds: dict[Tier, QueueBounds],
        *,
        overflow_tiers: frozenset[Tier] = frozenset(Settings.model_fields["overflow_tiers"].default),
        paid_reserve_share: float = 0.0,
        drain_ramp_s: float = DRAIN_RAMP_S,
        brownout: BrownoutSettings,
        metrics: ControlMetrics | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self.overflow_tiers = overflow_tiers
        self.capacities = dict(capacities)  # the whole fleet's places per pool
        self._reserve_share = paid_reserve_share
        self._gateways = 1
        self.gates = {
            pool: PoolGate(
                pool,
                capacity,
                bounds,
                paid_reserve=paid_reserve(capacity, paid_reserve_share),
                drain_ramp_s=drain_ramp_s,
                clock=clock,
                metrics=metrics,
            )
            for pool, capacity in capacities.items()
        }
        # A whole batch waiting means the pool is overloaded, whatever latencies say.
        self._depth_on = brownout.queue_depth
        self.brownout = BrownoutController(
            list(capacities),
            {pool: self._depth_on.get(pool, capacity) for pool, capacity in capacities.items()},
            lambda pool: self.gates[pool].depth(),
            brownout,
            metrics=metrics,
            clock=clock,
        )
        for gate in self.gates.values():
            gate.on_wait = self.brownout.record_queue_wait

    @classmethod
    def from_settings(
        cls, settings: Settings, worker_urls: dict[str, list[str]], metrics: ControlMetrics | None
    ) -> PoolControl:
        return cls(
            pool_capacities(settings, worker_urls),
            {tier: QueueBounds(max_waiting=n, max_wait_s=settings.queue.max_wait_s[tier])
             for tier, n in settings.queue.max_waiting.items()},
            overflow_tiers=frozenset(settings.overflow_tiers),
            paid_reserve_share=settings.pool.paid_reserve,
            drain_ramp_s=settings.queue.drain_ramp_s,
            brownout=settings.brownout,
            metrics=metrics,
        )  # fmt: skip

    def share_among(self, gateways: int) -> None:
        """Admit this gateway's share of each pool: its places divided by the gateway replicas alive (rounded up, at
        least one), so N gateways together let about the pool's capacity run, not N times it. A queue depth that means
        overload shrinks with the share (an explicit `FLEETCHAT_BROWNOUT_QUEUE_DEPTH` stays as set)."""
        gateways = max(1, gateways)
        if gateways == self._gateways:
            return
        self._gateways = gateways
        for pool, gate in self.gates.items():
            share = max(1, math.ceil(self.capacities[pool] / gateways))
            gate.resize(share, paid_reserve(share, self._reserve_share))
            self.brownout.depth_on[pool] = self._depth_on.get(pool, share)

    def record_first_token(self, pool: str, tier: Tier | str, seconds: float) -> None:
        """For the stream relay: a stream's time to first content token feeds its pool's brownout control."""
        self.brownout.record_first_token(pool, tier, seconds)

    def in_time(self, pool: str, tier: Tier) -> bool:
        """Whether `pool` would start a request of `tier` within the tier's TTFT objective (unknown counts as yes:
        before any request finished there is nothing to estimate from)."""
        gate = self.gates[pool]
        if gate.has_place(tier):
            return True
        if gate.queue_full(tier):
            return False
        expected = gate.expected_wait_s(tier)
        return expected is None or expected <= policy_for(tier).slo.ttft_p95_s

    async def place(
        self, tenant_id: str, tier: Tier, pool: str, body: ChatCompletionRequest, fallback: Fallback, receive: Receive
    ) -> Placed:
        """A place for the request in `pool`, or in the tier's next pool when it overflows; waits in the queue when
        needed (leaving it if the client goes away: ClientClosedRequestError); raises CapacityExceededError."""
        gate = self.gates[pool]
        slot = gate.try_take(tier)
        if slot is not None:
            return Placed(pool, body, slot)
        if tier in self.overflow_tiers and not self.in_time(pool, tier):
            other = fallback()
            if other is not None:
                other_pool, other_body = other
                if other_pool not in self.gates or not self.in_time(other_pool, tier):
                    raise self._overloaded(tier, pool, other_pool)
                slot = await unless_disconnected(self.gates[other_pool].take(tenant_id, tier), receive)
                self.count_downgrade(tier, pool, other_pool, "overload")
                return Placed(other_pool, other_body, slot, overflowed_from=pool)
        return Placed(pool, body, await unless_disconnected(gate.take(tenant_id, tier), receive))

    def count_downgrade(self, tier: Tier, from_pool: str, to_pool: str, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.downgrades.labels(tier.value, from_pool, to_pool, reason).inc()

    def _overloaded(self, tier: Tier, pool: str, other_pool: str) -> CapacityExceededError:
        if self.metrics is not None:
            self.metrics.refused.labels(tier.value, pool, "overflow_full").inc()
        gate = self.gates[pool]
        return CapacityExceededError(
            f"The model `{pool}` is at capacity and `{other_pool}` cannot take the overflow in time. Please retry "
            "after the delay in the retry-after header.",
            retry_after_s=round(gate.retry_after_s(tier)),
        )

"""Automatic brownout per pool, with hysteresis, and the admin override.

Each pool's pressure is the largest of: its queue depth over the depth that means overload, and per tier the recent
95th percentile of time to first token (`record_first_token`, called where content reaches the client) and of the
wait for a place in the pool (`record_queue_wait`), each over the tier's TTFT objective (`TierSlo.ttft_p95_s`).
Brownout switches on as soon as the pressure reaches 1, and off only once it has stayed below `off_ratio` for
`hold_s`: a pool near its limit does not flap. Percentiles are taken over the last `window_s` and only with at least
`min_samples` samples. An admin can force brownout on or off for every pool, or give control back (`auto`).

While a pool is in brownout, admission caps each request's completion budget at its tier's
`brownout_max_output_tokens` and the response says so (`x-fleetchat-brownout: true`).

Across gateway replicas (`shared_by`): every sync round each replica publishes its own pressure per pool to the
fleet's shared control state and takes the largest of the others' as one more input, so a pool that is overloaded as
seen from any replica is in brownout on all of them within two rounds, and leaves it on all of them by the same
hysteresis. The admin override is the fleet's too: set on one replica, it holds on every one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Literal, cast

from functions.metrics.control import ControlMetrics
from shared.fleet.tables import policy_for
from shared.fleet.tiers import Tier
from shared.settings import BrownoutSettings
from shared.storage.control_state import ControlState

BrownoutMode = Literal["auto", "on", "off"]
Clock = Callable[[], float]
MAX_SAMPLES = 2048  # per pool, tier and signal: a window of a busy pool keeps its newest
# The shared control state's namespaces: each replica's own pressure by pool (key: its instance id), and the override.
PRESSURES = "brownout-pressure"
OVERRIDE = "brownout-override"


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


class _Window:
    """Recent (time, seconds) samples of one signal."""

    def __init__(self) -> None:
        self.samples: deque[tuple[float, float]] = deque(maxlen=MAX_SAMPLES)

    def add(self, at: float, seconds: float) -> None:
        self.samples.append((at, seconds))

    def p95(self, now: float, window_s: float, min_samples: int) -> float | None:
        while self.samples and self.samples[0][0] < now - window_s:
            self.samples.popleft()
        if len(self.samples) < min_samples:
            return None
        return _p95([s for _, s in self.samples])


@dataclass
class _PoolState:
    on: bool = False
    calm_since: float | None = None
    pressure: float = 0.0  # what decides: the larger of this replica's and the fleet's
    own_pressure: float = 0.0  # from this replica's signals only (what it publishes)


class BrownoutController:
    def __init__(
        self,
        pools: list[str],
        depth_on: dict[str, int],
        depth_of: Callable[[str], int],
        settings: BrownoutSettings,
        *,
        metrics: ControlMetrics | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        """`depth_on[pool]`: the queue depth that alone means overload; `depth_of(pool)`: its depth now."""
        self.settings = settings
        self.depth_on = depth_on
        self.depth_of = depth_of
        self.metrics = metrics
        self.clock = clock
        self.mode: BrownoutMode = "auto"
        self._states = {pool: _PoolState() for pool in pools}
        self._ttft: dict[tuple[str, Tier], _Window] = {}
        self._waits: dict[tuple[str, Tier], _Window] = {}
        self._published: dict[str, bool] = dict.fromkeys(pools, False)
        self._fleet_pressure: dict[str, float] = {}  # the largest other replica's, by pool
        self._shared: tuple[ControlState, str, float] | None = None
        self._publish()

    # Signals -----------------------------------------------------------------------------------------------------
    def record_first_token(self, pool: str, tier: Tier | str, seconds: float) -> None:
        """A stream's time to its first content chunk at the gateway (from request arrival)."""
        self._record(self._ttft, pool, Tier(tier), seconds)

    def record_queue_wait(self, pool: str, tier: Tier | str, seconds: float) -> None:
        """How long a request waited for a place in the pool (0 when it got one at once)."""
        self._record(self._waits, pool, Tier(tier), seconds)

    def _record(self, windows: dict[tuple[str, Tier], _Window], pool: str, tier: Tier, seconds: float) -> None:
        if pool not in self._states:
            return
        windows.setdefault((pool, tier), _Window()).add(self.clock(), seconds)
        self._evaluate_pool(pool, self.clock())
        self._publish()

    # State -------------------------------------------------------------------------------------------------------
    def active(self, pool: str) -> bool:
        """Whether requests to `pool` get the brownout budget now (the override first)."""
        if self.mode != "auto":
            return self.mode == "on"
        state = self._states.get(pool)
        return state is not None and state.on

    def any_active(self) -> bool:
        return any(self.active(pool) for pool in self._states)

    def pools(self) -> dict[str, bool]:
        return {pool: self.active(pool) for pool in self._states}

    def pressure(self, pool: str) -> float:
        return self._states[pool].pressure

    def set_mode(self, mode: BrownoutMode) -> None:
        self.mode = mode
        self._publish()

    # The fleet ------------------------------------------------------------------------------------------------------
    def shared_by(self, state: ControlState, instance_id: str, ttl_s: float) -> None:
        """Share pressure and the override with the other replicas through `state` (`sync` every round); a replica's
        pressure counts for `ttl_s` after it last published it."""
        self._shared = (state, instance_id, ttl_s)

    async def set_fleet_mode(self, mode: BrownoutMode) -> None:
        """The admin override, for every replica (written first: if the store refuses, nothing changed)."""
        if self._shared is not None:
            state, _, _ = self._shared
            await state.put(OVERRIDE, "fleet", {"mode": mode})
        self.set_mode(mode)

    async def sync(self) -> None:
        """A fleet sync step: publish this replica's pressure, take the others' and the override, re-evaluate."""
        if self._shared is None:
            return
        state, instance_id, ttl_s = self._shared
        self.evaluate()
        own = {pool: pool_state.own_pressure for pool, pool_state in self._states.items()}
        await state.put(PRESSURES, instance_id, own, ttl_s=ttl_s)
        fleet: dict[str, float] = {}
        for replica, pressures in (await state.records(PRESSURES)).items():
            if replica == instance_id:
                continue
            for pool, pressure in pressures.items():
                if isinstance(pressure, int | float):
                    fleet[pool] = max(fleet.get(pool, 0.0), float(pressure))
        self._fleet_pressure = fleet
        override = (await state.records(OVERRIDE)).get("fleet")
        mode = override.get("mode") if override else None
        if mode in ("auto", "on", "off") and mode != self.mode:
            self.mode = cast(BrownoutMode, mode)
        self.evaluate()

    def evaluate(self) -> None:
        """Re-evaluate every pool (the ticker calls this, so brownout also ends when no request arrives)."""
        now = self.clock()
        for pool in self._states:
            self._evaluate_pool(pool, now)
        self._publish()

    def _own_pressure(self, pool: str, now: float) -> float:
        s = self.settings
        ratios = [self.depth_of(pool) / max(self.depth_on.get(pool, 1), 1)]
        for windows in (self._ttft, self._waits):
            for (p, tier), window in windows.items():
                if p != pool:
                    continue
                p95 = window.p95(now, s.window_s, s.min_samples)
                if p95 is not None:
                    ratios.append(p95 / policy_for(tier).slo.ttft_p95_s)
        return max(ratios)

    def _evaluate_pool(self, pool: str, now: float) -> None:
        state = self._states[pool]
        state.own_pressure = self._own_pressure(pool, now)
        state.pressure = max(state.own_pressure, self._fleet_pressure.get(pool, 0.0))
        if not state.on:
            if state.pressure >= 1.0:
                state.on, state.calm_since = True, None
            return
        if state.pressure >= self.settings.off_ratio:
            state.calm_since = None  # not calm: the hold starts again
        elif state.calm_since is None:
            state.calm_since = now
        elif now - state.calm_since >= self.settings.hold_s:
            state.on, state.calm_since = False, None

    def _publish(self) -> None:
        """Gauges and transition counts follow what requests actually get (the override included)."""
        for pool in self._states:
            active = self.active(pool)
            if active != self._published[pool] and self.metrics is not None:
                self.metrics.brownout_transitions.labels("on" if active else "off").inc()
            self._published[pool] = active
            if self.metrics is not None:
                self.metrics.brownout_pool_active.labels(pool).set(int(active))
        if self.metrics is not None:
            self.metrics.brownout_active.set(int(any(self._published.values())))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[BrownoutController]:
        """Re-evaluate every `tick_s` while the gateway runs (a sleeping task, woken by the loop's timer)."""

        async def tick() -> None:
            while True:
                await asyncio.sleep(self.settings.tick_s)
                self.evaluate()

        task = asyncio.create_task(tick(), name="brownout-control")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

"""The shadow judge's budget: judge calls per minute, taken without waiting (spent: drop). Deployed with several
gateway replicas the budget is the fleet's (`FleetCallBudget`: one token bucket in the shared control state), so
the judge's cost does not multiply with the number of gateways; `CallBudget` is one process's.

The local bucket is hand-rolled in a few lines rather than a rate-limit library: the only operation needed is a
non-blocking take on one event loop, and a new runtime dependency would also have to join the gateway's Modal image."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from shared.storage.control_state import ControlState, TokenBucket

log = logging.getLogger("fleetchat.judge")

# The fleet's bucket in the shared control state.
FLEET_SCOPE = "shadow-judge-calls"


class Budget(Protocol):
    async def take(self) -> bool:
        """Spend one call if the budget holds one; False (nothing spent) when it is spent."""
        ...


class CallBudget:
    """`per_minute` calls a minute on average, at most `per_minute` in a burst (the bucket starts full)."""

    def __init__(self, per_minute: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute <= 0:
            raise ValueError("per_minute must be positive")
        self.capacity = float(per_minute)
        self._rate_per_s = per_minute / 60.0
        self._clock = clock
        self._tokens = self.capacity
        self._last = clock()

    def try_take(self) -> bool:
        """Spend one call if the bucket holds one; False (nothing spent) when the budget is spent."""
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._last) * self._rate_per_s)
        self._last = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    async def take(self) -> bool:
        return self.try_take()


class FleetCallBudget:
    """The same bucket shared by every gateway replica. When the shared state cannot be reached the call is not made
    (the budget caps a cost; a shadow grade is never needed)."""

    def __init__(self, state: ControlState, per_minute: float) -> None:
        if per_minute <= 0:
            raise ValueError("per_minute must be positive")
        self._state = state
        self._bucket = TokenBucket(scope=FLEET_SCOPE, capacity=per_minute, per_s=per_minute / 60.0)

    async def take(self) -> bool:
        try:
            return await self._state.take(self._bucket)
        except Exception:
            log.warning("shadow judge: the fleet's budget is unreachable; the sample is dropped", exc_info=True)
            return False

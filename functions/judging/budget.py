"""The shadow judge's budget: a token bucket of judge calls per minute, taken without waiting (spent: drop).

Hand-rolled in a few lines rather than a rate-limit library: the only operation needed is a non-blocking take on one
event loop, and a new runtime dependency would also have to join the gateway's Modal image."""

from __future__ import annotations

import time
from collections.abc import Callable


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

"""Waiting for room in the limiter's fixed one-minute window, so that requests a test expects to be counted together
(a burst, or one admitted then one refused) cannot straddle a window boundary and each find a fresh window."""

from __future__ import annotations

import time

from functions.control.admission import WINDOW_S


def early_in_a_window(margin_s: float = 20.0) -> None:
    """Return once at least `margin_s` seconds are left in the current window (sleeping into the next if fewer are)."""
    left = WINDOW_S - time.time() % WINDOW_S
    if left < margin_s:
        time.sleep(left + 0.2)

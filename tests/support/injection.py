"""Held-out injection text for tests of the screen's wiring: a tool output carrying AgentDojo's injection (a source
the screen never trained on) that the shipped screen flags, the first such in the held-out data."""

from __future__ import annotations

from functools import cache


@cache
def held_out_attack_the_screen_flags() -> str:
    from functions.offline.injection_data.load import load_rows
    from functions.safety.injection_screen import shipped_injection_screen

    screen = shipped_injection_screen()
    return next(r.text for r in load_rows("test", ["agentdojo"]) if r.label == 1 and screen.flagged(r.text))

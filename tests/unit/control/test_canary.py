"""The canary's version choice (sticky per session, weighted without one) and its rollback decision over a window,
with a fake clock and a scripted draw; a rollback shared by every replica and kept across restarts."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from functions.control.canary import Canaries, CanaryMetrics, VersionChoice, canary_ring
from shared.errors import NotFoundError
from shared.fleet.canaries import CanarySpec
from shared.storage.control_state import ControlState
from shared.storage.sqlite.control_state import SQLiteControlState


class FakeClock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def _canaries(
    clock: FakeClock, draws: list[float] | None = None, shared: ControlState | None = None, **spec: object
) -> tuple[Canaries, CollectorRegistry]:
    registry = CollectorRegistry()
    fields = {"version": "org/model@canary-sha", "weight": 0.25, "worker_urls": ["http://canary"], **spec}
    pending = list(draws or [])
    canaries = Canaries(
        {"flagship": CanarySpec(**fields)},
        {"flagship": "org/model@stable-sha", "mini": "org/mini@sha"},
        CanaryMetrics(registry),
        clock,
        draw=lambda: pending.pop(0),
        shared=shared,
    )
    return canaries, registry


def _outcomes(canaries: Canaries, choice: VersionChoice, ok: int, errors: int) -> None:
    for _ in range(ok):
        canaries.record(choice, ok=True)
    for _ in range(errors):
        canaries.record(choice, ok=False)


def test_a_session_always_gets_the_same_version_and_the_weight_holds_over_many() -> None:
    canaries, _ = _canaries(FakeClock())
    sessions = [f"conv_{i:032x}" for i in range(2000)]
    first = {s: canaries.choose("flagship", s) for s in sessions}
    assert all(canaries.choose("flagship", s) == first[s] for s in sessions)  # never flips
    share = sum(choice.canary for choice in first.values()) / len(sessions)
    assert 0.2 < share < 0.3
    on_canary = next(choice for choice in first.values() if choice.canary)
    assert on_canary.ring == canary_ring("flagship") and on_canary.version == "org/model@canary-sha"
    # A pool without a canary is always its stable version.
    assert canaries.choose("mini", sessions[0]) == VersionChoice("mini", "mini", "org/mini@sha", canary=False)


def test_without_a_session_the_draw_decides_by_weight() -> None:
    canaries, _ = _canaries(FakeClock(), draws=[0.1, 0.9, 0.249, 0.25])
    assert [canaries.choose("flagship", None).canary for _ in range(4)] == [True, False, True, False]


async def test_rolled_back_when_its_error_rate_exceeds_the_stable_ones_by_the_margin_over_the_window() -> None:
    clock = FakeClock()
    canaries, registry = _canaries(clock, error_margin=0.1, min_requests=10, window_s=60)
    stable = canaries.stable("flagship")
    canary = VersionChoice("flagship", canary_ring("flagship"), "org/model@canary-sha", canary=True)
    _outcomes(canaries, stable, ok=18, errors=2)  # stable: 10 %
    _outcomes(canaries, canary, ok=5, errors=4)  # 44 %, but only 9 requests: not judged yet
    assert canaries.status("flagship").state == "active"
    clock.now += 61  # the window moves on: those outcomes no longer count
    _outcomes(canaries, stable, ok=18, errors=2)
    _outcomes(canaries, canary, ok=8, errors=2)  # 20 % against 10 %: exactly the margin, not above it
    assert canaries.status("flagship").state == "active"
    canaries.record(canary, ok=False)  # 3 of 11: 27 % > 10 % + 10 %
    status = canaries.status("flagship")
    assert status.state == "rolled_back" and "27.3%" in (status.rolled_back_reason or "")
    assert (status.canary_requests, status.canary_errors) == (11, 3)
    assert registry.get_sample_value("fleetchat_gateway_canary_rollbacks_total", {"pool": "flagship"}) == 1
    assert registry.get_sample_value("fleetchat_gateway_canary_active", {"pool": "flagship"}) == 0
    # No new traffic: every session and every draw gets the stable version, until an operator resets it.
    assert not any(canaries.choose("flagship", f"s{i}").canary for i in range(200))
    clock.now += 3600
    assert canaries.status("flagship").state == "rolled_back"  # time alone does not bring it back
    assert (await canaries.reset("flagship")).state == "active"
    assert any(canaries.choose("flagship", f"s{i}").canary for i in range(200))
    assert registry.get_sample_value("fleetchat_gateway_canary_active", {"pool": "flagship"}) == 1


async def test_a_canary_no_worse_than_stable_stays_and_reset_of_an_unknown_pool_is_a_404() -> None:
    canaries, _ = _canaries(FakeClock(), error_margin=0.05, min_requests=20)
    canary = VersionChoice("flagship", canary_ring("flagship"), "org/model@canary-sha", canary=True)
    _outcomes(canaries, canaries.stable("flagship"), ok=70, errors=30)  # a bad hour for everyone: 30 %
    _outcomes(canaries, canary, ok=66, errors=34)  # 34 %: within the margin of the stable version's
    assert canaries.status("flagship").state == "active"
    with pytest.raises(NotFoundError):
        await canaries.reset("mini")


async def test_a_rollback_reaches_every_replica_survives_a_restart_and_a_reset_anywhere_undoes_it(
    tmp_path: Path,
) -> None:
    replicas = [_canaries(FakeClock(), shared=SQLiteControlState(tmp_path / "control.db"), min_requests=3)[0]]
    replicas.append(_canaries(FakeClock(), shared=SQLiteControlState(tmp_path / "control.db"), min_requests=3)[0])
    first, second = replicas
    canary = VersionChoice("flagship", canary_ring("flagship"), "org/model@canary-sha", canary=True)
    _outcomes(first, canary, ok=0, errors=3)
    assert first.status("flagship").state == "rolled_back"
    await first.sync()  # published
    await second.sync()  # taken
    assert second.status("flagship").state == "rolled_back"
    assert not any(second.choose("flagship", f"s{i}").canary for i in range(200))

    restarted = _canaries(FakeClock(), shared=SQLiteControlState(tmp_path / "control.db"), min_requests=3)[0]
    await restarted.sync()  # every gateway restarted: the rollback holds from the start
    assert restarted.status("flagship").state == "rolled_back"
    # A new canary version is a new canary: the old version's rollback does not hold it back.
    newer = _canaries(FakeClock(), shared=SQLiteControlState(tmp_path / "control.db"), version="org/model@v3")[0]
    await newer.sync()
    assert newer.status("flagship").state == "active"

    assert (await second.reset("flagship")).state == "active"  # an operator, on another replica
    await first.sync()
    await restarted.sync()
    assert first.status("flagship").state == "active" and restarted.status("flagship").state == "active"

"""Brownout's state machine on a fake clock: on at the SLO, off only after a calm hold, per pool, and the override;
shared by replicas through the control state (SQLite here; the engines' contract test covers Redis)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from functions.control.brownout import BrownoutController
from functions.metrics.control import ControlMetrics
from shared.fleet.tables import policy_for
from shared.fleet.tiers import Tier
from shared.settings import BrownoutSettings
from shared.storage.sqlite.control_state import SQLiteControlState

SETTINGS = BrownoutSettings(window_s=10.0, min_samples=3, off_ratio=0.5, hold_s=5.0, tick_s=1.0)
ENTERPRISE_SLO = policy_for(Tier.ENTERPRISE).slo.ttft_p95_s


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Fleet:
    """A controller over two pools whose queue depths the test sets."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.depths = {"mini": 0, "flagship": 0}
        self.metrics = ControlMetrics(CollectorRegistry())
        self.control = BrownoutController(
            ["mini", "flagship"],
            {"mini": 8, "flagship": 8},
            self.depths.__getitem__,
            SETTINGS,
            metrics=self.metrics,
            clock=self.clock,
        )

    def at(self, seconds_later: float) -> None:
        self.clock.now += seconds_later
        self.control.evaluate()

    def transitions(self, to: str) -> float:
        return self.metrics.brownout_transitions.labels(to)._value.get()

    def gauge(self) -> float:
        return self.metrics.brownout_active._value.get()


def test_a_full_queue_turns_brownout_on_in_that_pool_only() -> None:
    fleet = Fleet()
    fleet.depths["mini"] = 7
    fleet.at(1)
    assert not fleet.control.active("mini")
    fleet.depths["mini"] = 8
    fleet.at(1)
    assert fleet.control.active("mini") and not fleet.control.active("flagship")
    assert fleet.gauge() == 1 and fleet.transitions("on") == 1


def test_off_only_after_the_pressure_stayed_low_for_the_hold_time() -> None:
    fleet = Fleet()
    fleet.depths["mini"] = 8
    fleet.at(1)
    fleet.depths["mini"] = 4  # below on (8) but not below off (0.5 x 8): stays on however long
    fleet.at(60)
    assert fleet.control.active("mini")
    fleet.depths["mini"] = 2  # calm: the hold starts
    fleet.at(1)
    fleet.at(4)
    assert fleet.control.active("mini")
    fleet.depths["mini"] = 5  # a spike before the hold ended: it starts again
    fleet.at(0.5)
    fleet.depths["mini"] = 0
    fleet.at(1)
    fleet.at(4.9)
    assert fleet.control.active("mini")
    fleet.at(0.1)
    assert not fleet.control.active("mini")
    assert fleet.gauge() == 0 and fleet.transitions("on") == 1 and fleet.transitions("off") == 1


def test_slow_first_tokens_turn_it_on_and_it_ends_once_they_age_out_and_the_hold_passed() -> None:
    fleet = Fleet()
    for _ in range(3):
        fleet.control.record_first_token("flagship", Tier.ENTERPRISE, ENTERPRISE_SLO * 1.2)
    assert fleet.control.active("flagship") and not fleet.control.active("mini")
    fleet.at(SETTINGS.window_s - 1)  # the slow samples are still in the window
    assert fleet.control.active("flagship")
    fleet.at(2)  # aged out: calm from now
    fleet.at(SETTINGS.hold_s)
    assert not fleet.control.active("flagship")


def test_too_few_samples_decide_nothing_and_fast_ones_keep_it_off() -> None:
    fleet = Fleet()
    fleet.control.record_first_token("mini", Tier.FREE, 100.0)
    fleet.control.record_queue_wait("mini", Tier.FREE, 100.0)
    assert not fleet.control.active("mini")  # one sample each: below min_samples
    for _ in range(40):
        fleet.control.record_queue_wait("mini", Tier.PLUS, 0.0)
    fleet.control.record_queue_wait("mini", Tier.PLUS, 100.0)
    assert not fleet.control.active("mini")  # one slow wait in 41 is above the p95


def test_long_queue_waits_measured_against_the_tiers_slo_turn_it_on() -> None:
    fleet = Fleet()
    free_slo = policy_for(Tier.FREE).slo.ttft_p95_s
    for _ in range(3):
        fleet.control.record_queue_wait("mini", Tier.FREE, free_slo * 0.9)
    assert not fleet.control.active("mini")
    for _ in range(3):
        fleet.control.record_queue_wait("mini", Tier.ENTERPRISE, ENTERPRISE_SLO)  # a tighter SLO
    assert fleet.control.active("mini")
    assert fleet.control.pressure("mini") >= 1.0


def test_the_admin_override_forces_either_way_and_auto_gives_control_back() -> None:
    fleet = Fleet()
    fleet.control.set_mode("on")
    assert fleet.control.pools() == {"mini": True, "flagship": True} and fleet.gauge() == 1
    assert fleet.transitions("on") == 2  # each pool switched
    fleet.depths["mini"] = 8
    fleet.control.set_mode("off")
    fleet.at(1)
    assert not fleet.control.any_active() and fleet.gauge() == 0
    fleet.control.set_mode("auto")
    assert fleet.control.pools() == {"mini": True, "flagship": False}


async def test_replicas_agree_one_round_after_any_of_them_sees_overload_and_leave_it_together(
    tmp_path: Path,
) -> None:
    a, b = Fleet(), Fleet()
    for name, replica in (("gw-a", a), ("gw-b", b)):
        replica.control.shared_by(SQLiteControlState(tmp_path / "control.db"), name, ttl_s=3.0)
    a.depths["mini"] = 8  # only gateway a's queue is full
    a.at(1)
    await a.control.sync()
    await b.control.sync()
    assert a.control.active("mini") and b.control.active("mini")
    assert not b.control.active("flagship")
    a.depths["mini"] = 0  # calm everywhere: both leave after the hold, by the same hysteresis
    for _ in range(7):
        a.at(1)
        b.at(1)
        await a.control.sync()
        await b.control.sync()
    assert not a.control.active("mini") and not b.control.active("mini")


async def test_the_admin_override_set_on_one_replica_holds_on_every_one(tmp_path: Path) -> None:
    a, b = Fleet(), Fleet()
    for name, replica in (("gw-a", a), ("gw-b", b)):
        replica.control.shared_by(SQLiteControlState(tmp_path / "control.db"), name, ttl_s=3.0)
    await a.control.set_fleet_mode("on")
    await b.control.sync()
    assert b.control.mode == "on" and b.control.active("flagship")
    await b.control.set_fleet_mode("auto")
    await a.control.sync()
    assert a.control.mode == "auto" and not a.control.active("flagship")

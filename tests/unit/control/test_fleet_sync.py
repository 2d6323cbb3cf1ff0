"""The fleet sync loop: heartbeats make gateways see each other, a failing step is counted and the others still run,
a gateway that stopped cleanly is gone at once and one that went silent ages out."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import CollectorRegistry

from functions.control.fleet_sync import FleetMetrics, FleetSync
from shared.settings import ControlStateSettings
from shared.storage.sqlite.control_state import SQLiteControlState

SETTINGS = ControlStateSettings(sync_s=0.05, liveness_s=0.3)


def _member(path: Path) -> tuple[FleetSync, CollectorRegistry]:
    registry = CollectorRegistry()
    return FleetSync(SQLiteControlState(path), SETTINGS, FleetMetrics(registry)), registry


async def test_gateways_see_each_other_and_a_silent_one_ages_out(tmp_path: Path) -> None:
    a, _ = _member(tmp_path / "control.db")
    b, registry = _member(tmp_path / "control.db")
    assert a.instance_id != b.instance_id
    await a.round()
    await b.round()
    assert await b.is_alive(a.instance_id) and await a.is_alive(b.instance_id)
    assert registry.get_sample_value("fleetchat_gateway_fleet_gateways") == 2
    await asyncio.sleep(0.4)  # a never beats again: as after kill -9
    await b.round()
    assert not await b.is_alive(a.instance_id)
    assert await b.is_alive(b.instance_id)


async def test_a_clean_stop_withdraws_the_heartbeat_at_once(tmp_path: Path) -> None:
    a, _ = _member(tmp_path / "control.db")
    b, _ = _member(tmp_path / "control.db")
    async with a.running():
        await b.round()
        assert await b.is_alive(a.instance_id)
    await b.round()
    assert not await b.is_alive(a.instance_id)


async def test_a_failing_step_is_counted_and_the_others_still_run(tmp_path: Path) -> None:
    fleet, registry = _member(tmp_path / "control.db")
    ran: list[str] = []

    async def broken() -> None:
        raise ConnectionError("store down")

    async def fine() -> None:
        ran.append("fine")

    fleet.every_sync("broken", broken)
    fleet.every_sync("fine", fine)
    await fleet.round()
    await fleet.round()
    assert ran == ["fine", "fine"]
    assert registry.get_sample_value("fleetchat_gateway_fleet_sync_failures_total", {"step": "broken"}) == 2

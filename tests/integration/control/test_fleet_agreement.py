"""Gateway replicas agree through the shared control state, over real HTTP: two gateways on one data dir (SQLite
`control.db`), syncing every 0.2 s. The brownout override set on one holds on the other within 2 s; a worker one
gateway found dead is held back by the other; each admits its share of a pool's places; a canary rollback made by
one stops the canary on both and holds for a gateway started afterwards, until an operator resets it on any."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from tests.integration.conftest import Gateway, GatewayFactory
from tests.integration.control.test_canary import CANARY_VERSION, STABLE_VERSION, _admin, _ask, failing_worker
from tests.integration.control.test_failover import _session_owned_by
from tests.support.processes import free_port
from tests.support.prom import labelled
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import scripted_worker

FAST_SYNC = {"control_state": {"sync_s": 0.2, "liveness_s": 1.0}}


def _within(seconds: float, check: Callable[[], bool]) -> float:
    """How long until `check` held (it must within `seconds`)."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < seconds, f"not within {seconds} s"
        time.sleep(0.05)
    return time.monotonic() - started


def _pair(gateway_for: GatewayFactory, workers: dict[str, list[str]], **settings: object) -> tuple[Gateway, Gateway]:
    return gateway_for(workers, **FAST_SYNC, **settings), gateway_for(workers, **FAST_SYNC, **settings)


def test_the_brownout_override_and_the_pools_share_hold_on_every_gateway(gateway_for: GatewayFactory) -> None:
    with serve(scripted_worker("Fine.")) as url:
        a, b = _pair(gateway_for, {"mini": [url]}, pool={"capacity": {"mini": 8}})
        admin = _admin(a)
        # Each admits half the pool's 8 places once both see each other.
        _within(2.0, lambda: all(labelled(g.url, "fleetchat_gateway_pool_capacity", pool="mini") == 4 for g in (a, b)))
        assert httpx.put(f"{a.url}/admin/v1/brownout", json={"mode": "on"}, headers=admin).json()["active"] is True
        took = _within(2.0, lambda: httpx.get(f"{b.url}/admin/v1/brownout", headers=admin).json()["mode"] == "on")
        assert took < 2.0
        assert httpx.put(f"{b.url}/admin/v1/brownout", json={"mode": "auto"}, headers=admin).status_code == 200
        _within(2.0, lambda: httpx.get(f"{a.url}/admin/v1/brownout", headers=admin).json()["mode"] == "auto")


def test_a_worker_one_gateway_found_dead_is_held_back_by_the_other(gateway_for: GatewayFactory) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with serve(scripted_worker("Alive.")) as alive:
        a, b = _pair(gateway_for, {"mini": [dead, alive]}, breaker={"failure_threshold": 2, "cooldown_s": 30})
        owned_by_dead = _session_owned_by([dead, alive], dead)  # its requests try the dead replica first
        for _ in range(3):  # each fails over to the live one; a's breaker for the dead one opens
            assert _ask(a, owned_by_dead).status_code == 200
        assert labelled(a.url, "fleetchat_gateway_breaker_state", pool="mini", replica="0") == 2
        _within(2.0, lambda: labelled(b.url, "fleetchat_gateway_breaker_state", pool="mini", replica="0") == 2)
        assert labelled(b.url, "fleetchat_gateway_breaker_state", pool="mini", replica="1") == 0


def test_a_canary_rollback_holds_on_every_gateway_and_for_one_started_after_it(gateway_for: GatewayFactory) -> None:
    broken = failing_worker()
    with serve(scripted_worker("Stable.")) as stable_url, serve(broken) as canary_url:
        canary = {"version": CANARY_VERSION, "weight": 0.5, "worker_urls": [canary_url], "min_requests": 5}
        a, b = _pair(gateway_for, {"mini": [stable_url]}, canaries={"mini": canary})
        admin = _admin(a)
        for i in range(30):
            _ask(a, f"session-{i}")
        assert httpx.get(f"{a.url}/admin/v1/canaries", headers=admin).json()["data"][0]["state"] == "rolled_back"
        status = lambda g: httpx.get(f"{g.url}/admin/v1/canaries", headers=admin).json()["data"][0]  # noqa: E731
        _within(2.0, lambda: status(b)["state"] == "rolled_back")
        calls = broken.state.calls
        assert all(_ask(b, f"session-{i}").headers["x-fleetchat-model-version"] == STABLE_VERSION for i in range(20))
        assert broken.state.calls == calls
        # A gateway started now (as after a restart of every one) knows it from its first request.
        c = gateway_for({"mini": [stable_url]}, **FAST_SYNC, canaries={"mini": canary})
        assert status(c)["state"] == "rolled_back"
        assert httpx.post(f"{c.url}/admin/v1/canaries/mini/reset", headers=admin).json()["state"] == "active"
        _within(2.0, lambda: status(a)["state"] == "active" and status(b)["state"] == "active")

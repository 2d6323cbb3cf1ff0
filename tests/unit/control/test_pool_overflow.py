"""Overflow: plus goes to the tier's next pool when flagship cannot start it in time; beyond that, 503. Other tiers
queue. Pool capacities from settings."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from functions.control.pool_admission import CapacityExceededError, QueueBounds, Slot
from functions.control.pool_overflow import PoolControl, paid_reserve, pool_capacities
from functions.metrics.control import ControlMetrics
from shared.fleet.tables import policy_for, tables
from shared.fleet.tiers import Tier
from shared.settings import BrownoutSettings, Settings
from shared.wire.schemas import ChatCompletionRequest, ChatMessage

BOUNDS = {tier: QueueBounds(max_waiting=4, max_wait_s=30) for tier in Tier}
BODY = ChatCompletionRequest(model="flagship", messages=[ChatMessage(role="user", content="hi")])
PLUS_SLO = policy_for(Tier.PLUS).slo.ttft_p95_s


def to_mini() -> tuple[str, ChatCompletionRequest]:
    return "mini", BODY.model_copy(update={"model": "mini"})


async def never_disconnects() -> dict[str, str]:
    await asyncio.Event().wait()
    return {"type": "http.disconnect"}


def control() -> tuple[PoolControl, ControlMetrics]:
    metrics = ControlMetrics(CollectorRegistry())
    return PoolControl(
        {"flagship": 1, "mini": 1}, BOUNDS, drain_ramp_s=0, brownout=BrownoutSettings(), metrics=metrics
    ), metrics


def fill(c: PoolControl, pool: str, service_s: float | None) -> Slot:
    """Take the pool's one place; the pool's measured service time is `service_s`."""
    slot = c.gates[pool].try_take(Tier.FREE)
    assert slot is not None
    c.gates[pool].service_s = service_s
    return slot


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_free_place_in_the_asked_pool_is_used() -> None:
    c, _ = control()
    placed = await c.place("t", Tier.PLUS, "flagship", BODY, to_mini, never_disconnects)
    assert placed.pool == "flagship" and placed.overflowed_from is None and placed.body is BODY


async def test_plus_overflows_to_mini_when_flagship_would_start_it_too_late() -> None:
    c, metrics = control()
    fill(c, "flagship", service_s=PLUS_SLO * 2)
    placed = await c.place("t", Tier.PLUS, "flagship", BODY, to_mini, never_disconnects)
    assert placed.pool == "mini" and placed.body.model == "mini" and placed.overflowed_from == "flagship"
    assert metrics.downgrades.labels("plus", "flagship", "mini", "overload")._value.get() == 1
    placed.slot.release()
    assert c.gates["mini"].in_flight == 0


async def test_plus_waits_for_flagship_when_the_wait_is_within_its_slo() -> None:
    c, _ = control()
    running = fill(c, "flagship", service_s=PLUS_SLO / 4)
    waiting = asyncio.create_task(c.place("t", Tier.PLUS, "flagship", BODY, to_mini, never_disconnects))
    await settle()
    assert c.gates["flagship"].depth() == 1
    running.release()
    placed = await waiting
    assert placed.pool == "flagship" and placed.overflowed_from is None


async def test_beyond_the_overflow_pool_plus_is_refused_with_retry_after() -> None:
    c, metrics = control()
    fill(c, "flagship", service_s=PLUS_SLO * 2)
    fill(c, "mini", service_s=PLUS_SLO * 2)
    with pytest.raises(CapacityExceededError) as refused:
        await c.place("t", Tier.PLUS, "flagship", BODY, to_mini, never_disconnects)
    assert refused.value.status_code == 503 and 1 <= int(refused.value.headers["retry-after"]) <= 60
    assert metrics.refused.labels("plus", "flagship", "overflow_full")._value.get() == 1


async def test_enterprise_does_not_overflow_it_queues_ahead() -> None:
    c, _ = control()
    running = fill(c, "flagship", service_s=PLUS_SLO * 2)
    gate = c.gates["flagship"]
    free = asyncio.create_task(gate.take("f", Tier.FREE))
    await settle()
    enterprise = asyncio.create_task(c.place("e", Tier.ENTERPRISE, "flagship", BODY, to_mini, never_disconnects))
    await settle()
    assert gate.depth() == 2
    running.release()
    placed = await enterprise
    assert placed.pool == "flagship" and not free.done()
    placed.slot.release()
    (await free).release()


async def test_plus_without_a_next_pool_queues() -> None:
    c, _ = control()
    fill(c, "flagship", service_s=PLUS_SLO * 2)
    waiting = asyncio.create_task(c.place("t", Tier.PLUS, "flagship", BODY, lambda: None, never_disconnects))
    await settle()
    assert c.gates["flagship"].depth() == 1
    waiting.cancel()
    await settle()
    assert c.gates["flagship"].depth() == 0


def test_capacities_come_from_the_setting_the_replicas_or_the_pool_table() -> None:
    urls = {"mini": ["http://a", "http://b"], "flagship": ["http://c"]}
    local = Settings(
        pool={"capacity_per_replica": 3, "capacity": {"flagship": 5}},
    )
    assert pool_capacities(local, urls) == {"mini": 6, "flagship": 5}
    deployed = Settings(environment="deployed", worker_urls=urls, session_secret="s" * 32)
    flagship = tables().pools["flagship"].deployed
    assert pool_capacities(deployed, urls)["flagship"] == flagship.max_concurrent_inputs * flagship.max_containers


def test_the_paid_reserve_is_a_share_of_places_but_never_all_of_them() -> None:
    assert paid_reserve(8, 0.25) == 2 and paid_reserve(3, 0.25) == 1  # at least one place where there is a share
    assert paid_reserve(2, 0.9) == 1 and paid_reserve(1, 0.5) == 0  # free always keeps a place
    assert paid_reserve(8, 0.0) == 0


async def test_each_gateway_admits_its_share_of_a_pool_and_waiters_get_places_a_larger_share_frees() -> None:
    control = PoolControl(
        {"mini": 8, "flagship": 3},
        {tier: QueueBounds(max_waiting=10, max_wait_s=5) for tier in Tier},
        brownout=BrownoutSettings(),
        drain_ramp_s=0,
    )
    control.share_among(3)
    assert (control.gates["mini"].capacity, control.gates["flagship"].capacity) == (3, 1)
    assert control.brownout.depth_on["mini"] == 3  # a full share waiting is overload, as a full pool was
    held = [control.gates["mini"].try_take(Tier.PLUS) for _ in range(4)]
    assert held[3] is None  # the fourth waits: three places here
    waiting = asyncio.create_task(control.gates["mini"].take("t", Tier.PLUS))
    await asyncio.sleep(0)
    assert not waiting.done()
    control.share_among(2)  # a gateway left: four places each
    slot = await asyncio.wait_for(waiting, 1)
    assert control.gates["mini"].capacity == 4 and control.gates["mini"].in_flight == 4
    slot.release()

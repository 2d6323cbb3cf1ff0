"""A pool's places and queue: priority between tiers, round-robin between tenants, bounds, cancellation, drain rate."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from functions.control.pool_admission import (
    CapacityExceededError,
    ClientClosedRequestError,
    PoolGate,
    QueueBounds,
    Slot,
    unless_disconnected,
)
from functions.metrics.control import ControlMetrics
from shared.fleet.tiers import Tier

ROOMY = {tier: QueueBounds(max_waiting=10, max_wait_s=30) for tier in Tier}


def gate(capacity: int = 1, bounds: dict[Tier, QueueBounds] | None = None, **kwargs: object) -> PoolGate:
    kwargs.setdefault("drain_ramp_s", 0)
    return PoolGate("mini", capacity, bounds or ROOMY, **kwargs)  # type: ignore[arg-type]


async def settle() -> None:
    """Let every ready task run (grants resolve futures; the waiting tasks resume on the next loop turns)."""
    for _ in range(5):
        await asyncio.sleep(0)


class Recorder:
    """Queued requests as tasks; `order` is who got a place, in the order they got it."""

    def __init__(self, g: PoolGate) -> None:
        self.gate = g
        self.order: list[str] = []
        self.slots: dict[str, Slot] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def queue(self, name: str, tenant: str, tier: Tier) -> None:
        async def wait() -> None:
            self.slots[name] = await self.gate.take(tenant, tier)
            self.order.append(name)

        self.tasks[name] = asyncio.create_task(wait())

    async def serve_all(self) -> list[str]:
        """Finish each granted request in turn until every queued one has had its place."""
        while len(self.order) < len(self.tasks):
            await settle()
            for name in list(self.order):
                slot = self.slots.pop(name, None)
                if slot is not None:
                    slot.release()
        return self.order


async def test_a_free_place_is_taken_at_once_and_given_back_once() -> None:
    g = gate(capacity=2)
    first, second = g.try_take(Tier.FREE), await g.take("t", Tier.FREE)
    assert first is not None and g.in_flight == 2 and g.try_take(Tier.ENTERPRISE) is None
    first.release()
    first.release()  # a second release changes nothing
    assert g.in_flight == 1
    second.release()
    assert g.in_flight == 0


async def test_waiters_are_served_enterprise_then_plus_then_free() -> None:
    g = gate()
    held = g.try_take(Tier.FREE)
    assert held is not None
    recorder = Recorder(g)
    recorder.queue("free", "a", Tier.FREE)
    recorder.queue("plus", "b", Tier.PLUS)
    recorder.queue("enterprise", "c", Tier.ENTERPRISE)
    await settle()
    assert g.depth() == 3 and g.ahead_of(Tier.PLUS) == 2 and g.ahead_of(Tier.ENTERPRISE) == 1
    held.release()
    assert await recorder.serve_all() == ["enterprise", "plus", "free"]


async def test_tenants_of_one_tier_take_turns() -> None:
    g = gate()
    held = g.try_take(Tier.FREE)
    assert held is not None
    recorder = Recorder(g)
    for i in range(3):
        recorder.queue(f"noisy{i}", "noisy", Tier.FREE)
    await settle()
    recorder.queue("quiet0", "quiet", Tier.FREE)
    recorder.queue("other0", "other", Tier.FREE)
    await settle()
    held.release()
    assert await recorder.serve_all() == ["noisy0", "quiet0", "other0", "noisy1", "noisy2"]


async def test_a_newcomer_never_jumps_the_queue() -> None:
    g = gate()
    held = g.try_take(Tier.FREE)
    assert held is not None
    recorder = Recorder(g)
    recorder.queue("waiting", "a", Tier.FREE)
    await settle()
    held.release()  # the place goes to the waiter, not to whoever asks next
    assert g.try_take(Tier.ENTERPRISE) is None
    assert await recorder.serve_all() == ["waiting"]


async def test_a_full_tier_queue_refuses_with_retry_after_and_leaves_other_tiers_queueing() -> None:
    metrics = ControlMetrics(CollectorRegistry())
    bounds = {**ROOMY, Tier.FREE: QueueBounds(max_waiting=1, max_wait_s=30)}
    g = gate(bounds=bounds, metrics=metrics)
    held = g.try_take(Tier.FREE)
    assert held is not None
    recorder = Recorder(g)
    recorder.queue("free", "a", Tier.FREE)
    await settle()
    with pytest.raises(CapacityExceededError) as refused:
        await g.take("b", Tier.FREE)
    assert refused.value.status_code == 503 and refused.value.code == "capacity_exceeded"
    assert 1 <= int(refused.value.headers["retry-after"]) <= 60
    assert metrics.refused.labels("free", "mini", "queue_full")._value.get() == 1
    recorder.queue("plus", "b", Tier.PLUS)  # another tier's queue has room
    await settle()
    assert g.depth() == 2
    held.release()
    assert await recorder.serve_all() == ["plus", "free"]


async def test_a_wait_past_the_tiers_bound_is_refused_and_leaves_the_queue() -> None:
    bounds = {**ROOMY, Tier.FREE: QueueBounds(max_waiting=5, max_wait_s=0.01)}
    g = gate(bounds=bounds)
    held = g.try_take(Tier.PLUS)
    assert held is not None
    with pytest.raises(CapacityExceededError, match="no place freed up in time"):
        await g.take("a", Tier.FREE)
    assert g.depth() == 0 and g.in_flight == 1
    held.release()
    assert g.in_flight == 0


async def test_a_cancelled_waiter_leaves_the_queue_and_holds_nothing() -> None:
    g = gate()
    held = g.try_take(Tier.FREE)
    assert held is not None
    recorder = Recorder(g)
    recorder.queue("gone", "a", Tier.FREE)
    recorder.queue("stays", "b", Tier.FREE)
    await settle()
    recorder.tasks["gone"].cancel()
    await settle()
    assert g.depth() == 1
    held.release()
    await settle()
    assert recorder.order == ["stays"] and g.in_flight == 1


async def test_a_waiter_cancelled_just_after_its_grant_gives_the_place_back() -> None:
    g = gate()
    held = g.try_take(Tier.FREE)
    assert held is not None
    recorder = Recorder(g)
    recorder.queue("gone", "a", Tier.FREE)
    await settle()
    held.release()  # granted: its future is resolved, but the task has not resumed yet
    recorder.tasks["gone"].cancel()
    await settle()
    assert recorder.order == [] and g.in_flight == 0 and g.depth() == 0


async def test_a_client_that_disconnects_while_queued_leaves_the_queue() -> None:
    g = gate()
    held = g.try_take(Tier.FREE)
    assert held is not None
    gone = asyncio.Event()

    async def receive() -> dict[str, str]:
        await gone.wait()
        return {"type": "http.disconnect"}

    waiting = asyncio.create_task(unless_disconnected(g.take("a", Tier.FREE), receive))
    await settle()
    assert g.depth() == 1
    gone.set()
    with pytest.raises(ClientClosedRequestError):
        await waiting
    assert g.depth() == 0
    held.release()
    assert g.in_flight == 0


async def test_after_an_outage_the_backlog_drains_at_the_bounded_rate_paid_first() -> None:
    g = PoolGate("mini", 4, ROOMY, drain_ramp_s=0.2)  # 4 places: 20 re-entries per second, 1 at once
    held = [g.try_take(Tier.FREE) for _ in range(4)]
    recorder = Recorder(g)
    for i in range(3):
        recorder.queue(f"free{i}", f"f{i}", Tier.FREE)
    recorder.queue("plus", "p", Tier.PLUS)
    await settle()
    g._bucket.tokens = 1  # the burst is one place (capacity // 4)
    for slot in held:  # the replica answered everything at once (it came back)
        assert slot is not None
        slot.release()
    await settle()
    assert recorder.order == ["plus"], "only the burst re-enters at once; the highest tier first"
    await asyncio.wait_for(asyncio.gather(*recorder.tasks.values()), timeout=10)
    assert recorder.order == ["plus", "free0", "free1", "free2"]


async def test_the_expected_wait_grows_with_the_queue_ahead() -> None:
    g = gate(capacity=2)
    assert g.expected_wait_s(Tier.FREE) == 0.0
    held = [g.try_take(Tier.FREE), g.try_take(Tier.FREE)]
    assert g.expected_wait_s(Tier.FREE) is None  # nothing finished yet: no estimate
    g.service_s = 4.0
    recorder = Recorder(g)
    recorder.queue("free", "a", Tier.FREE)
    await settle()
    assert g.expected_wait_s(Tier.ENTERPRISE) == 2.0  # first in line: one place frees up every 2 s
    assert g.expected_wait_s(Tier.FREE) == 4.0  # behind the free waiter
    for slot in held:
        assert slot is not None
        slot.release()
    await recorder.serve_all()


async def test_places_kept_for_paid_tiers_let_them_start_at_once_under_a_free_load() -> None:
    g = gate(capacity=4, paid_reserve=1)
    free = [g.try_take(Tier.FREE) for _ in range(3)]
    assert all(free) and g.try_take(Tier.FREE) is None
    recorder = Recorder(g)
    recorder.queue("free", "a", Tier.FREE)
    await settle()
    enterprise = g.try_take(Tier.ENTERPRISE)  # ahead of the waiting free request, into the kept place
    assert enterprise is not None and g.in_flight == 4 and g.depth() == 1
    enterprise.release()
    await settle()
    assert recorder.order == [], "the kept place never goes to free"
    free[0].release()  # type: ignore[union-attr]
    assert await recorder.serve_all() == ["free"]


async def test_a_held_stream_gives_its_place_back_when_it_ends_is_cut_or_never_starts() -> None:
    g = gate(capacity=3)

    async def body() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        yield b"data: [DONE]\n\n"

    finished, cut, dropped = (g.try_take(Tier.FREE) for _ in range(3))
    assert finished is not None and cut is not None and dropped is not None and g.in_flight == 3
    assert [chunk async for chunk in finished.hold(body())] == [b"data: 1\n\n", b"data: [DONE]\n\n"]
    assert g.in_flight == 2
    relay = cut.hold(body())
    await anext(relay)
    await relay.aclose()  # the client went away mid-stream
    assert g.in_flight == 1
    dropped.hold(body())  # a response that never started: nothing iterates it
    gc.collect()
    assert g.in_flight == 0

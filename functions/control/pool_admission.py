"""Priority admission per model pool: how many requests run at once in each pool, and who gets the next free place.

Each pool has a capacity (places: requests this gateway lets run on the pool at once), of which a share is kept for
paid tiers: free requests never take the last `paid_reserve` places, so a saturating free load leaves room for a paid
request to start at once. A request takes a place at once while its tier may have one and nobody of its tier or a
higher one waits; otherwise it waits in the pool's queue: enterprise before plus before free, and within a tier
round-robin between tenants, so one noisy tenant cannot starve the others of its tier. Each tier's
queue is bounded in length and in wait: a request that finds it full, or waits too long, is refused with 503
`capacity_exceeded` and a `retry-after` (the OpenAI SDK retries it). Free has the shortest queue and wait, so it is
refused first. Queued requests re-enter at a bounded rate (a token bucket), so after an outage the backlog drains
gradually, paid tiers first, instead of all at once onto a replica that just came back.

Everything runs on the gateway's event loop: waiters are futures, no thread and no polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from functions.metrics.control import ControlMetrics
from shared.errors import FleetchatError, ServiceUnavailableError
from shared.fleet.tiers import Tier
from shared.settings import QueueSettings

# Lower is served first.
PRIORITY: dict[Tier, int] = {Tier.ENTERPRISE: 0, Tier.PLUS: 1, Tier.FREE: 2}
BY_PRIORITY: tuple[Tier, ...] = tuple(sorted(PRIORITY, key=PRIORITY.__getitem__))
SERVICE_EWMA_WEIGHT = 0.2  # each finished request's share of the running estimate of how long a place is held

Clock = Callable[[], float]
WaitObserver = Callable[[str, Tier, float], None]  # (pool, tier, seconds waited)

DRAIN_RAMP_S: float = QueueSettings.model_fields["drain_ramp_s"].default  # the section's default, stated there


class CapacityExceededError(ServiceUnavailableError):
    """The pool has no place for this request in time (its tier's queue is full or it waited too long)."""

    default_code = "capacity_exceeded"


class ClientClosedRequestError(FleetchatError):
    """The client went away while its request waited for a place (nginx's 499; nobody reads the answer)."""

    status_code = 499
    error_type = "invalid_request_error"
    default_code = "client_closed_request"


class QueueBounds(BaseModel):
    """How many requests of a tier may wait for one pool, and for how long."""

    max_waiting: int = Field(ge=0)
    max_wait_s: float = Field(gt=0, le=600)


@dataclass
class Slot:
    """A place in a pool, held while the request runs; `release` it exactly once (later calls do nothing)."""

    gate: PoolGate
    tier: Tier
    waited_s: float
    granted_at: float
    released: bool = False

    @property
    def pool(self) -> str:
        return self.gate.pool

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.gate.release(self)

    @contextlib.asynccontextmanager
    async def released_if_raising(self) -> AsyncIterator[None]:
        """Give the place back when the block raises (the worker failed, the client went away)."""
        try:
            yield
        except BaseException:
            self.release()
            raise

    def hold(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """`body` relayed as is; the place is given back when it ends, however it ends (a client gone included), or
        when the relay is dropped without ever being iterated (a response that never started)."""

        async def relayed() -> AsyncIterator[bytes]:
            try:
                async for chunk in body:
                    yield chunk
            finally:
                self.release()

        wrapper = relayed()
        weakref.finalize(wrapper, self.release).atexit = False  # at exit there is no pool left to give it back to
        return wrapper


@dataclass
class _Waiter:
    tenant: str
    tier: Tier
    enqueued_at: float
    future: asyncio.Future[Slot] = field(repr=False)


class _DrainBucket:
    """A token bucket for queued requests re-entering the pool: `rate` per second, at most `burst` at once."""

    def __init__(self, rate: float | None, burst: int, clock: Clock) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self.tokens = float(burst)
        self.updated = clock()

    def take(self) -> float:
        """0 when a token was taken, else the seconds until one is there."""
        if self.rate is None:
            return 0.0
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


class PoolGate:
    """One pool's places and its queue of waiting requests."""

    def __init__(
        self,
        pool: str,
        capacity: int,
        bounds: dict[Tier, QueueBounds],
        *,
        paid_reserve: int = 0,
        drain_ramp_s: float = DRAIN_RAMP_S,
        clock: Clock = time.monotonic,
        metrics: ControlMetrics | None = None,
        on_wait: WaitObserver | None = None,
    ) -> None:
        if capacity < 1 or not 0 <= paid_reserve < capacity:
            raise ValueError("a pool needs at least one place, and one that free requests may take")
        self.pool = pool
        self.capacity = capacity
        # The places each tier may fill: free stops short of the places kept for paid tiers.
        self.limit = {tier: capacity - (paid_reserve if tier is Tier.FREE else 0) for tier in PRIORITY}
        self.bounds = bounds
        self.clock = clock
        self.metrics = metrics
        self.on_wait = on_wait
        self.in_flight = 0
        # Per tier: tenant -> its waiters in arrival order; the tenant served next is first (round-robin).
        self._queues: dict[Tier, OrderedDict[str, deque[_Waiter]]] = {tier: OrderedDict() for tier in PRIORITY}
        self._depth: dict[Tier, int] = dict.fromkeys(PRIORITY, 0)
        # A whole batch's worth of queued work re-enters over at least `drain_ramp_s` (0: no limit).
        self._drain_ramp_s = drain_ramp_s
        rate = capacity / drain_ramp_s if drain_ramp_s > 0 else None
        self._bucket = _DrainBucket(rate, max(1, capacity // 4), clock)
        self._timer: asyncio.TimerHandle | None = None
        self.service_s: float | None = None  # running estimate of how long a request holds a place
        if metrics is not None:
            metrics.capacity.labels(pool).set(capacity)
            metrics.queue_depth.labels(pool).set(0)
            metrics.in_flight.labels(pool).set(0)

    def resize(self, capacity: int, paid_reserve: int) -> None:
        """Change the number of places (this gateway's share of the pool changed); places held stay held, and waiters
        get places the new size frees at once."""
        if capacity < 1 or not 0 <= paid_reserve < capacity:
            raise ValueError("a pool needs at least one place, and one that free requests may take")
        if capacity == self.capacity and self.limit[Tier.FREE] == capacity - paid_reserve:
            return
        self.capacity = capacity
        self.limit = {tier: capacity - (paid_reserve if tier is Tier.FREE else 0) for tier in PRIORITY}
        self._bucket.rate = capacity / self._drain_ramp_s if self._drain_ramp_s > 0 else None
        self._bucket.burst = max(1, capacity // 4)
        if self.metrics is not None:
            self.metrics.capacity.labels(self.pool).set(capacity)
        self._dispatch()

    def depth(self, tier: Tier | None = None) -> int:
        return sum(self._depth.values()) if tier is None else self._depth[tier]

    def ahead_of(self, tier: Tier) -> int:
        """Waiters a new request of `tier` would wait behind: its own tier's and every higher one's."""
        return sum(n for t, n in self._depth.items() if PRIORITY[t] <= PRIORITY[tier])

    def has_place(self, tier: Tier) -> bool:
        """Whether a request of `tier` arriving now starts at once (a place it may take, nobody it must let first)."""
        return self.in_flight < self.limit[tier] and self.ahead_of(tier) == 0

    def queue_full(self, tier: Tier) -> bool:
        return self._depth[tier] >= self.bounds[tier].max_waiting

    def expected_wait_s(self, tier: Tier) -> float | None:
        """How long a request of `tier` arriving now would wait: 0 with a place free; None before any request finished
        (nothing to estimate from). Places free up at about capacity / service time per second."""
        if self.has_place(tier):
            return 0.0
        if self.service_s is None:
            return None
        return (self.ahead_of(tier) + 1) * self.service_s / self.limit[tier]

    def retry_after_s(self, tier: Tier) -> float:
        """When a refused request should try again: when the queue ahead of it has likely drained (1 to 60 s)."""
        expected = self.expected_wait_s(tier)
        return min(max(expected if expected is not None else 1.0, 1.0), 60.0)

    def try_take(self, tier: Tier) -> Slot | None:
        """A place now, or None (the pool is full or others wait: a newcomer never jumps the queue)."""
        if not self.has_place(tier):
            return None
        return self._grant(tier, 0.0)

    async def take(self, tenant: str, tier: Tier) -> Slot:
        """A place, at once or after waiting in the queue; raises CapacityExceededError when the tier's queue is full
        or the wait exceeds its bound. Cancelled while waiting (the client went away), it leaves the queue."""
        slot = self.try_take(tier)
        if slot is not None:
            return slot
        bounds = self.bounds[tier]
        if self.queue_full(tier):
            raise self._refused(tier, "queue_full")
        waiter = _Waiter(tenant, tier, self.clock(), asyncio.get_running_loop().create_future())
        self._queues[tier].setdefault(tenant, deque()).append(waiter)
        self._changed_depth(tier, +1)
        self._dispatch()  # the drain bucket may have been the only thing holding the queue
        try:
            async with asyncio.timeout(bounds.max_wait_s):
                return await asyncio.shield(waiter.future)
        except TimeoutError:
            if waiter.future.done():  # granted as the time ran out: take it
                return waiter.future.result()
            self._remove(waiter)
            raise self._refused(tier, "wait_timeout") from None
        except BaseException:  # cancelled: leave the queue, or give back a place granted meanwhile
            if waiter.future.done():
                waiter.future.result().release()
            else:
                self._remove(waiter)
                waiter.future.cancel()
            raise

    def release(self, slot: Slot) -> None:
        held = self.clock() - slot.granted_at
        self.service_s = (
            held if self.service_s is None else (1 - SERVICE_EWMA_WEIGHT) * self.service_s + SERVICE_EWMA_WEIGHT * held
        )
        self.in_flight -= 1
        if self.metrics is not None:
            self.metrics.in_flight.labels(self.pool).set(self.in_flight)
        self._dispatch()

    def _grant(self, tier: Tier, waited_s: float) -> Slot:
        self.in_flight += 1
        if self.metrics is not None:
            self.metrics.in_flight.labels(self.pool).set(self.in_flight)
            self.metrics.queue_wait.labels(tier.value, self.pool).observe(waited_s)
        if self.on_wait is not None:
            self.on_wait(self.pool, tier, waited_s)
        return Slot(self, tier, waited_s, self.clock())

    def _dispatch(self) -> None:
        """Hand free places to waiters: highest tier first, round-robin between its tenants, at the drain rate."""
        while self.depth() > 0 and self.in_flight < self.limit[self._next_tier()]:
            delay = self._bucket.take()
            if delay > 0:
                self._wake_in(delay)
                return
            waiter = self._pop_next()
            waiter.future.set_result(self._grant(waiter.tier, self.clock() - waiter.enqueued_at))

    def _wake_in(self, delay: float) -> None:
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # released outside the loop (a finalizer): the next release or arrival dispatches
                return

            def wake() -> None:
                self._timer = None
                self._dispatch()

            self._timer = loop.call_later(delay, wake)

    def _next_tier(self) -> Tier:
        return next(t for t in BY_PRIORITY if self._depth[t] > 0)

    def _pop_next(self) -> _Waiter:
        tier = self._next_tier()
        tenants = self._queues[tier]
        tenant, waiters = next(iter(tenants.items()))
        waiter = waiters.popleft()
        if waiters:
            tenants.move_to_end(tenant)  # this tenant had its turn: the others of its tier go first
        else:
            del tenants[tenant]
        self._changed_depth(tier, -1)
        return waiter

    def _remove(self, waiter: _Waiter) -> None:
        waiters = self._queues[waiter.tier].get(waiter.tenant)
        if waiters is None or waiter not in waiters:
            return
        waiters.remove(waiter)
        if not waiters:
            del self._queues[waiter.tier][waiter.tenant]
        self._changed_depth(waiter.tier, -1)

    def _changed_depth(self, tier: Tier, delta: int) -> None:
        self._depth[tier] += delta
        if self.metrics is not None:
            self.metrics.queue_depth.labels(self.pool).set(self.depth())

    def _refused(self, tier: Tier, reason: str) -> CapacityExceededError:
        if self.metrics is not None:
            self.metrics.refused.labels(tier.value, self.pool, reason).inc()
        why = "too many requests are waiting" if reason == "queue_full" else "no place freed up in time"
        return CapacityExceededError(
            f"The model `{self.pool}` is at capacity ({why}). Please retry after the delay in the retry-after header.",
            retry_after_s=math.ceil(self.retry_after_s(tier)),
        )


async def until_disconnected(receive: Callable[[], Awaitable[dict[str, Any]]]) -> None:
    """Returns when the ASGI client disconnects (the request body is already read, so nothing else arrives)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(taking: Awaitable[Slot], receive: Callable[[], Awaitable[dict[str, Any]]]) -> Slot:
    """Wait for a place while watching the client: gone first, the wait is cancelled (it leaves the queue) and
    ClientClosedRequestError is raised."""
    take = asyncio.ensure_future(taking)
    watch = asyncio.ensure_future(until_disconnected(receive))
    try:
        await asyncio.wait({take, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not take.done():
            take.cancel()
            await asyncio.gather(take, return_exceptions=True)
    if take.cancelled():
        raise ClientClosedRequestError("The client closed the request while it waited for capacity.")
    return take.result()

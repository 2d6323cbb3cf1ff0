"""The replica circuit breaker's state machine, the router's breaker-aware candidate order, and breakers shared by
gateway replicas through the control state."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from functions.control.replica_breakers import BreakerState, ReplicaBreaker, ReplicaBreakers
from functions.control.routing import HashRing, PoolRouter
from functions.metrics.failover import FailoverMetrics
from shared.storage.sqlite.control_state import SQLiteControlState


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _breaker(clock: Clock, threshold: int = 3) -> ReplicaBreaker:
    return ReplicaBreaker(threshold=threshold, cooldown_s=10.0, clock=clock)


def test_opens_only_after_consecutive_failures() -> None:
    breaker = _breaker(Clock())
    breaker.failed()
    breaker.failed()
    breaker.succeeded()  # a success in between resets the count
    breaker.failed()
    breaker.failed()
    assert breaker.state is BreakerState.CLOSED and breaker.admit()
    breaker.failed()
    assert breaker.state is BreakerState.OPEN and not breaker.admit() and not breaker.available


def test_half_open_after_the_cool_down_lets_exactly_one_probe_through() -> None:
    clock = Clock()
    breaker = _breaker(clock, threshold=1)
    breaker.failed()
    clock.now += 9.9
    assert breaker.state is BreakerState.OPEN
    clock.now += 0.2
    assert breaker.state is BreakerState.HALF_OPEN and breaker.available
    assert breaker.admit()  # the probe
    assert not breaker.admit() and not breaker.available  # everyone else waits for its verdict
    breaker.succeeded()
    assert breaker.state is BreakerState.CLOSED and breaker.admit() and breaker.admit()


def test_a_failed_probe_reopens_for_a_whole_new_cool_down() -> None:
    clock = Clock()
    breaker = _breaker(clock, threshold=1)
    breaker.failed()
    clock.now += 11
    assert breaker.admit()
    breaker.failed()
    assert breaker.state is BreakerState.OPEN
    clock.now += 9
    assert breaker.state is BreakerState.OPEN
    clock.now += 2
    assert breaker.state is BreakerState.HALF_OPEN


def test_a_probe_without_a_verdict_frees_the_probe_slot() -> None:
    clock = Clock()
    breaker = _breaker(clock, threshold=1)
    breaker.failed()
    clock.now += 11
    assert breaker.admit() and not breaker.admit()
    breaker.released()  # the client left before the replica answered
    assert breaker.admit()


def test_order_moves_held_back_replicas_last_and_keeps_the_rest_in_place() -> None:
    urls = ["http://a", "http://b", "http://c", "http://d"]
    breakers = ReplicaBreakers({"mini": urls}, threshold=1, cooldown_s=10, clock=Clock())
    breakers.breaker("mini", "http://b").failed()
    assert breakers.order("mini", ["http://c", "http://b", "http://a", "http://d"]) == [
        "http://c",
        "http://a",
        "http://d",
        "http://b",
    ]


def test_an_open_breaker_moves_only_the_sessions_its_replica_owned() -> None:
    urls = [f"http://w{i}" for i in range(4)]
    breakers = ReplicaBreakers({"mini": urls}, threshold=1, cooldown_s=10, clock=Clock())
    router = PoolRouter({"mini": urls}, breakers)
    ring = HashRing(urls)
    sessions = [f"conv-{i}" for i in range(200)]
    before = {s: router.candidates("mini", s)[0] for s in sessions}
    assert before == {s: next(ring.candidates(s)) for s in sessions}
    breakers.breaker("mini", "http://w2").failed()
    after = {s: router.candidates("mini", s) for s in sessions}
    for session in sessions:
        assert after[session][-1] == "http://w2" or before[session] != "http://w2"
        if before[session] != "http://w2":
            assert after[session][0] == before[session]  # healthy replicas keep their sessions
        else:
            assert after[session][0] == list(ring.candidates(session))[1]  # the next one clockwise takes over
    assert any(before[s] == "http://w2" for s in sessions)


def test_the_gauge_reads_each_replicas_state_by_index_never_its_url() -> None:
    registry, clock = CollectorRegistry(), Clock()
    breakers = ReplicaBreakers(
        {"mini": ["http://a", "http://b"]}, threshold=1, cooldown_s=10, metrics=FailoverMetrics(registry), clock=clock
    )
    breakers.breaker("mini", "http://b").failed()
    text = generate_latest(registry).decode()
    assert 'fleetchat_gateway_breaker_state{pool="mini",replica="0"} 0.0' in text
    assert 'fleetchat_gateway_breaker_state{pool="mini",replica="1"} 2.0' in text
    clock.now += 11
    assert 'fleetchat_gateway_breaker_state{pool="mini",replica="1"} 1.0' in generate_latest(registry).decode()
    assert "http://" not in text


async def test_a_breaker_one_gateway_opens_is_open_on_the_others_for_the_rest_of_its_cool_down(tmp_path: Path) -> None:
    urls = {"mini": ["http://w0", "http://w1"]}
    clocks, wall = [Clock(), Clock()], [1000.0]
    gateways = [ReplicaBreakers(urls, threshold=2, cooldown_s=10.0, clock=clock) for clock in clocks]
    for breakers in gateways:
        breakers.shared_by(SQLiteControlState(tmp_path / "control.db"), "chat", wall_clock=lambda: wall[0])
    a, b = gateways
    a.breaker("mini", "http://w1").failed()
    a.breaker("mini", "http://w1").failed()
    clocks[0].now += 4
    wall[0] += 4
    await a.sync()
    await b.sync()
    assert b.state("mini", "http://w1") is BreakerState.OPEN and b.order("mini", ["http://w1", "http://w0"]) == [
        "http://w0",
        "http://w1",
    ]
    assert b.state("mini", "http://w0") is BreakerState.CLOSED
    clocks[1].now += 6.1  # 4 s had passed on a when b learnt of it: the cool-down ends at the same moment
    assert b.state("mini", "http://w1") is BreakerState.HALF_OPEN
    assert b.breaker("mini", "http://w1").admit()
    b.breaker("mini", "http://w1").succeeded()  # b's probe found it answering: the fleet's record goes
    wall[0] += 6.1
    await b.sync()
    c = ReplicaBreakers(urls, threshold=2, cooldown_s=10.0, clock=Clock())
    c.shared_by(SQLiteControlState(tmp_path / "control.db"), "chat", wall_clock=lambda: wall[0])
    await c.sync()
    assert c.state("mini", "http://w1") is BreakerState.CLOSED

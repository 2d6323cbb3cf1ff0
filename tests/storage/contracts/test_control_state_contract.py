"""The shared control state's contract, on both engines: SQLite on a temp file and Debian's redis-server over TCP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from shared.storage.control_state import ControlState, StreamEvent, StreamOpen, TokenBucket
from shared.storage.conversations import StoreUnavailableError
from shared.storage.redis_control_state import RedisControlState
from shared.storage.sqlite.control_state import SQLiteControlState
from tests.support.processes import free_port
from tests.support.redis_server import redis_server


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=["sqlite", "redis"])
def open_state(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], ControlState]:
    """Opens another client of one store (a second gateway process's)."""
    if request.param == "sqlite":
        return lambda: SQLiteControlState(tmp_path / "control.db")
    url = request.getfixturevalue("redis_url")
    return lambda: RedisControlState(url, prefix=f"test-{tmp_path.name}")


@pytest.fixture
async def state(open_state: Callable[[], ControlState]) -> AsyncIterator[ControlState]:
    opened = open_state()
    yield opened
    await opened.aclose()


def events(first: int, *payloads: bytes) -> list[StreamEvent]:
    return [StreamEvent(seq=first + i, data=data) for i, data in enumerate(payloads)]


async def test_a_stream_is_found_by_any_of_its_names_and_only_by_its_tenant(state: ControlState) -> None:
    opened = StreamOpen(stream_id="s1", tenant_id="ten_a", owner="gw-1", headers={"x-request-id": "req_1"})
    await state.open_stream(opened, ["req_1"])
    await state.name_stream("ten_a", "chatcmpl-1", "s1")
    assert (await state.find_stream("ten_a", "req_1")).takeover is None  # type: ignore[union-attr]
    for name in ("req_1", "chatcmpl-1"):
        found = await state.find_stream("ten_a", name)
        assert found is not None and found.stream_id == "s1" and found.owner == "gw-1"
        assert found.headers == {"x-request-id": "req_1"}
    assert await state.find_stream("ten_b", "req_1") is None
    assert await state.find_stream("ten_a", "unknown") is None


async def test_events_are_read_in_order_after_any_event_and_a_retried_append_adds_nothing(
    state: ControlState,
) -> None:
    await state.open_stream(StreamOpen(stream_id="s2", tenant_id="t", owner="gw"), ["s2"])
    await state.append_events("s2", "gw", events(1, b"a", b"b"), ended=False, max_bytes=1 << 20, ttl_s=60)
    await state.append_events("s2", "gw", events(3, b"c"), ended=False, max_bytes=1 << 20, ttl_s=60)
    await state.append_events("s2", "gw", events(3, b"c"), ended=False, max_bytes=1 << 20, ttl_s=60)  # a retry
    assert [e.data for e in await state.read_events("s2", 0, 100)] == [b"a", b"b", b"c"]
    assert [e.seq for e in await state.read_events("s2", 1, 100)] == [2, 3]
    assert [e.seq for e in await state.read_events("s2", 0, 2)] == [1, 2]
    assert await state.read_events("s2", 3, 100) == []
    record = await state.find_stream("t", "s2")
    assert record is not None and (record.first_seq, record.next_seq, record.ended) == (1, 4, False)
    await state.append_events("s2", "gw", events(4, b"[DONE]"), ended=True, max_bytes=1 << 20, ttl_s=60)
    record = await state.find_stream("t", "s2")
    assert record is not None and record.ended and record.next_seq == 5


async def test_the_oldest_events_go_first_past_the_byte_bound_and_one_always_stays(state: ControlState) -> None:
    await state.open_stream(StreamOpen(stream_id="s3", tenant_id="t", owner="gw"), ["s3"])
    await state.append_events(
        "s3", "gw", events(1, b"x" * 400, b"y" * 400, b"z" * 400), ended=False, max_bytes=900, ttl_s=60
    )
    held = await state.read_events("s3", 0, 100)
    assert [e.seq for e in held] == [2, 3]
    record = await state.find_stream("t", "s3")
    assert record is not None and record.first_seq == 2
    await state.append_events("s3", "gw", events(4, b"w" * 2000), ended=False, max_bytes=900, ttl_s=60)
    assert [e.seq for e in await state.read_events("s3", 0, 100)] == [4]


async def test_an_ended_stream_is_forgotten_after_its_ttl(state: ControlState) -> None:
    await state.open_stream(StreamOpen(stream_id="s4", tenant_id="t", owner="gw"), ["s4"])
    await state.append_events("s4", "gw", events(1, b"[DONE]"), ended=True, max_bytes=1 << 20, ttl_s=0.2)
    assert await state.find_stream("t", "s4") is not None
    await asyncio.sleep(0.4)
    assert await state.find_stream("t", "s4") is None


async def test_records_replace_expire_and_delete(state: ControlState) -> None:
    await state.put("canary", "flagship", {"version": "v2", "reason": "errors"})
    await state.put("canary", "mini", {"version": "v9"})
    await state.put("canary", "mini", {"version": "v10"})
    await state.put("heartbeat", "gw-1", {"at": 1}, ttl_s=0.2)
    assert await state.records("canary") == {
        "flagship": {"version": "v2", "reason": "errors"},
        "mini": {"version": "v10"},
    }
    assert await state.records("heartbeat") == {"gw-1": {"at": 1}}
    await asyncio.sleep(0.4)
    assert await state.records("heartbeat") == {}
    await state.delete("canary", "mini")
    assert list(await state.records("canary")) == ["flagship"]
    assert await state.records("nothing") == {}


async def test_a_bucket_gives_its_capacity_then_refills_at_its_rate(state: ControlState) -> None:
    bucket = TokenBucket(scope="judge", capacity=3, per_s=10)
    assert [await state.take(bucket) for _ in range(4)] == [True, True, True, False]
    await asyncio.sleep(0.25)  # 2.5 tokens back
    assert [await state.take(bucket) for _ in range(3)] == [True, True, False]


async def test_two_clients_of_one_store_share_one_bucket(
    state: ControlState, open_state: Callable[[], ControlState]
) -> None:
    other = open_state()
    bucket = TokenBucket(scope="fleet", capacity=4, per_s=0.001)
    taken = await asyncio.gather(*(client.take(bucket) for client in [state, other] * 4))
    assert sum(taken) == 4
    await other.aclose()


async def test_an_unreachable_redis_is_a_store_unavailable_error() -> None:
    state = RedisControlState(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    with pytest.raises(StoreUnavailableError):
        await state.records("canary")
    await state.aclose()


async def test_only_the_owner_writes_and_one_claimant_takes_a_stream_over(state: ControlState) -> None:
    takeover = {"pool": "mini", "body": {"messages": [{"role": "user", "content": "hi"}]}}
    await state.open_stream(StreamOpen(stream_id="s5", tenant_id="t", owner="gw-a", takeover=takeover), ["s5"])
    assert await state.append_events("s5", "gw-a", events(1, b"a"), ended=False, max_bytes=1 << 20, ttl_s=60)
    assert not await state.append_events("s5", "gw-b", events(2, b"b"), ended=False, max_bytes=1 << 20, ttl_s=60)
    claims = await asyncio.gather(*(state.claim_stream("s5", "gw-a", f"gw-{n}") for n in ("b", "c", "d")))
    assert sorted(claims) == [False, False, True]
    record = await state.find_stream("t", "s5")
    assert record is not None and record.owner != "gw-a" and record.takeover == takeover
    # The gateway taken over from is fenced out; the new owner goes on after the last event held.
    assert not await state.append_events("s5", "gw-a", events(2, b"x"), ended=False, max_bytes=1 << 20, ttl_s=60)
    assert await state.append_events("s5", record.owner, events(2, b"b"), ended=True, max_bytes=1 << 20, ttl_s=60)
    assert [e.data for e in await state.read_events("s5", 0, 10)] == [b"a", b"b"]
    assert not await state.claim_stream("s5", record.owner, "gw-e")  # ended: nothing to take over


async def test_a_lease_admits_its_limit_of_holders_across_clients_and_frees_a_place_on_release(
    state: ControlState, open_state: Callable[[], ControlState]
) -> None:
    other = open_state()
    held = await asyncio.gather(
        *(c.acquire_lease("sandbox:t", f"run-{n}", 2, 60) for n, c in enumerate([state, other] * 3))
    )
    assert sum(held) == 2
    holders = [f"run-{n}" for n, taken in enumerate(held) if taken]
    assert await state.acquire_lease("sandbox:t", holders[0], 2, 60)  # the same holder renews, takes no new place
    assert not await other.acquire_lease("sandbox:t", "late", 2, 60)
    assert await state.acquire_lease("sandbox:u", "late", 2, 60)  # another scope is apart
    await other.release_lease("sandbox:t", holders[1])
    await other.release_lease("sandbox:t", "never-held")
    assert await state.acquire_lease("sandbox:t", "late", 2, 60)
    await other.aclose()


async def test_a_lease_never_released_is_gone_at_its_expiry(state: ControlState) -> None:
    assert await state.acquire_lease("sandbox:v", "dead-gateway", 1, 0.2)
    assert not await state.acquire_lease("sandbox:v", "next", 1, 60)
    await asyncio.sleep(0.3)
    assert await state.acquire_lease("sandbox:v", "next", 1, 60)

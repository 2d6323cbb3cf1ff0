"""The replay buffers' bounds (per response, per tenant, per gateway, in time with a fake clock), tenant isolation,
exact replay after an event id, and what a drop does: the generation goes on, and only an unattended grace period or
a cancel ends it, closing its books once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from functions.chat.streams.resumable import (
    InvalidLastEventIdError,
    ResumableStreams,
    ResumeLimits,
    ResumeMetrics,
    StreamEventsGoneError,
    StreamNotFoundError,
    asks_resumable,
    parse_last_event_id,
)
from shared.errors import InvalidRequestError
from shared.wire.sse import DONE

KIB = 1024


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _registry(clock: FakeClock, **limits: float) -> tuple[ResumableStreams, CollectorRegistry]:
    registry = CollectorRegistry()
    return ResumableStreams(ResumeLimits(**limits), ResumeMetrics(registry), clock), registry


def _event(n: int, size: int = 300) -> bytes:
    body = f'data: {{"n":{n},"pad":"'.encode()
    return body + b"x" * (size - len(body) - 4) + b'"}\n\n'


def _filled(streams: ResumableStreams, tenant: str, completion_id: str, count: int, size: int = 300) -> object:
    stream = streams.open(tenant, {})
    streams.register(stream, completion_id)
    for n in range(count):
        streams.append(stream, _event(n, size))
    return stream


def test_one_response_keeps_its_newest_events_within_its_byte_bound() -> None:
    streams, registry = _registry(FakeClock(), response_max_bytes=KIB)
    stream = _filled(streams, "ten_a", "c1", 10)
    assert stream.next_seq == 11 and stream.first_seq == 8  # 3 x 300 bytes fit in 1 KiB: the oldest went first
    assert stream.size == 900 == streams.total_bytes
    assert registry.get_sample_value("fleetchat_gateway_resume_buffer_bytes") == 900
    stream.check_resumable(7)  # the events after 7 are all there
    with pytest.raises(StreamEventsGoneError):
        stream.check_resumable(6)
    with pytest.raises(StreamEventsGoneError):
        streams.resume("ten_a", "c1", 0)
    assert registry.get_sample_value("fleetchat_gateway_stream_resumes_total", {"outcome": "gone"}) == 1


def test_a_tenant_over_its_bound_loses_its_oldest_responses_events_first_and_nobody_elses() -> None:
    streams, _ = _registry(FakeClock(), tenant_max_bytes=2 * KIB)
    other = _filled(streams, "ten_b", "b1", 3)
    older = _filled(streams, "ten_a", "a1", 4)
    newer = _filled(streams, "ten_a", "a2", 4)  # 8 x 300 = 2400 bytes > 2048: two of the older's events go
    assert older.first_seq == 3 and newer.first_seq == 1
    assert streams.tenant_bytes("ten_a") == 1800 and streams.tenant_bytes("ten_b") == 900
    assert other.first_seq == 1


def test_the_gateway_bound_drops_the_oldest_response_first_across_tenants() -> None:
    streams, _ = _registry(FakeClock(), total_max_bytes=2 * KIB)
    first = _filled(streams, "ten_b", "b1", 4)
    second = _filled(streams, "ten_a", "a1", 4)
    assert first.first_seq == 3 and second.first_seq == 1 and streams.total_bytes == 1800


def test_an_ended_buffer_is_forgotten_after_its_time_and_not_before() -> None:
    clock = FakeClock()
    streams, registry = _registry(clock, ttl_s=60)
    stream = _filled(streams, "ten_a", "c1", 2)
    streams.append(stream, DONE)
    clock.now += 3600  # a stream still generating is never expired by time
    assert streams.find("ten_a", "c1") is stream
    streams.end(stream)
    clock.now += 59
    assert streams.find("ten_a", "c1") is stream
    clock.now += 1
    with pytest.raises(StreamNotFoundError):
        streams.find("ten_a", "c1")
    assert streams.total_bytes == 0 and streams.tenant_bytes("ten_a") == 0
    assert registry.get_sample_value("fleetchat_gateway_resume_buffer_bytes") == 0


def test_another_tenant_never_finds_a_response() -> None:
    streams, registry = _registry(FakeClock())
    _filled(streams, "ten_a", "c1", 1)
    with pytest.raises(StreamNotFoundError):
        streams.resume("ten_b", "c1", 0)
    assert registry.get_sample_value("fleetchat_gateway_stream_resumes_total", {"outcome": "not_found"}) == 1


def test_last_event_id_is_a_number_within_the_stream() -> None:
    assert parse_last_event_id(None) == 0 and parse_last_event_id(" 12 ") == 12
    for bad in ("-1", "1.5", "abc", "9" * 19):
        with pytest.raises(InvalidRequestError):
            parse_last_event_id(bad)
    streams, _ = _registry(FakeClock())
    stream = _filled(streams, "ten_a", "c1", 2)
    stream.check_resumable(2)  # had everything: nothing to replay, still fine
    with pytest.raises(InvalidLastEventIdError):
        stream.check_resumable(3)


class Generation:
    """Stands in for the relay: yields events when told to; its `finally` is where the relay closes its books."""

    def __init__(self) -> None:
        self.go = asyncio.Queue[bytes]()
        self.closed_books = 0

    async def events(self) -> AsyncIterator[bytes]:
        try:
            while True:
                event = await self.go.get()
                yield event
                if event == DONE:
                    return
        finally:
            self.closed_books += 1


async def _read(stream: object, after: int, count: int) -> list[bytes]:
    reader = stream.attach(after)
    try:
        return [await anext(reader) for _ in range(count)]
    finally:
        await reader.aclose()


async def test_a_dropped_stream_keeps_generating_and_replays_exactly_after_the_last_id() -> None:
    streams, registry = _registry(FakeClock(), grace_s=600)
    generation = Generation()
    headers = {"x-conversation-id": "conv_1", "x-request-id": "req_1", "x-ratelimit-remaining-requests": "1"}
    stream = streams.start("ten_a", generation.events(), lambda: "c1", headers, resumable=True)
    assert "x-ratelimit-remaining-requests" not in stream.headers  # stale rate-limit headers are not repeated
    assert streams.find("ten_a", "req_1") is stream  # by its request id before any chunk named the completion
    generation.go.put_nowait(_event(1, 100))
    first = await _read(stream, 0, 1)  # the client reads one event, then drops
    assert first[0].startswith(b"id: 1\ndata: ")
    for n in (2, 3):
        generation.go.put_nowait(_event(n, 100))
    generation.go.put_nowait(DONE)
    await asyncio.wait_for(asyncio.shield(stream.producer), 5)  # generated to the end with nobody attached
    assert generation.closed_books == 1
    replay = await _read(streams.resume("ten_a", "c1", 1), 1, 3)
    assert [event.split(b"\n", 1)[0] for event in replay] == [b"id: 2", b"id: 3", b"id: 4"]
    assert replay[-1] == b"id: 4\n" + DONE
    assert registry.get_sample_value("fleetchat_gateway_stream_detaches_total", {"outcome": "finished"}) == 1


@pytest.mark.parametrize(
    ("grace_s", "resumable"),
    [(0, True), (600, False)],  # a resumable stream when its grace ends; any other at once (an SDK client's drop)
)
async def test_an_unattended_stream_is_aborted_when_its_grace_ends_and_says_so(grace_s: float, resumable: bool) -> None:
    streams, registry = _registry(FakeClock(), grace_s=grace_s)
    generation = Generation()
    stream = streams.start("ten_a", generation.events(), lambda: "c1", {}, resumable=resumable)
    generation.go.put_nowait(_event(1, 100))
    await _read(stream, 0, 1)
    await asyncio.wait_for(asyncio.gather(stream.producer, return_exceptions=True), 5)
    assert generation.closed_books == 1 and stream.ended
    tail = await _read(streams.find("ten_a", "c1"), 1, 2)
    assert tail[0].startswith(b"id: 2\nevent: error\n") and b"response_stopped" in tail[0]
    assert tail[1] == b"id: 3\n" + DONE
    assert registry.get_sample_value("fleetchat_gateway_stream_detaches_total", {"outcome": "abandoned"}) == 1


async def test_a_reattached_client_cancels_the_grace_and_a_cancel_stops_at_once() -> None:
    streams, registry = _registry(FakeClock(), grace_s=0.2)
    generation = Generation()
    stream = streams.start("ten_a", generation.events(), lambda: "c1", {}, resumable=True)
    generation.go.put_nowait(_event(1, 100))
    await _read(stream, 0, 1)
    reader = stream.attach(1)  # back before the grace ended
    generation.go.put_nowait(_event(2, 100))
    assert (await anext(reader)).startswith(b"id: 2\n")
    await asyncio.sleep(0.3)  # longer than the grace: it no longer applies while a client is attached
    assert not stream.ended
    assert registry.get_sample_value("fleetchat_gateway_stream_detaches_total", {"outcome": "resumed"}) == 1
    assert await streams.cancel("ten_a", "c1") is True
    assert generation.closed_books == 1 and stream.ended
    rest = [event async for event in reader]  # the attached client sees the end, never a silent cut
    assert b"response_stopped" in rest[0] and rest[-1].endswith(DONE)
    assert await streams.cancel("ten_a", "c1") is False


async def test_an_attached_client_that_falls_behind_the_bounds_is_told_never_cut_silently() -> None:
    streams, _ = _registry(FakeClock(), response_max_bytes=KIB)
    stream = _filled(streams, "ten_a", "c1", 1)
    reader = stream.attach(0)
    assert (await anext(reader)).startswith(b"id: 1\n")
    for n in range(10):  # the client reads nothing while 3 KB arrive: its next events are dropped
        streams.append(stream, _event(n))
    rest = [event async for event in reader]
    assert rest[0].startswith(b"id: 12\nevent: error\n") and b"stream_events_expired" in rest[0]
    assert rest[1] == b"id: 13\n" + DONE


@pytest.mark.parametrize(("value", "asks"), [("true", True), ("True", True), ("yes", True), ("1", True), ("on", True),
                                             ("false", False), ("no", False), ("", False), (None, False)])  # fmt: skip
def test_the_resumable_header_takes_the_usual_spellings_of_yes(value: str | None, asks: bool) -> None:
    assert asks_resumable(value) is asks

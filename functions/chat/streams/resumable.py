"""Resumable chat streams: number each SSE event a response sends (`id:`), keep the events in a bounded replay
buffer, and run the generation apart from the client's connection, so a client that drops can reconnect with
`Last-Event-ID` and get the missed events, then the live stream, until `[DONE]` (docs/resumable-streams.md).

A drop is not a Stop: after the last client detaches, the answer keeps generating into its buffer for a grace period;
only an explicit cancel or the grace period running out aborts it (the relay then bills what was generated and
keeps the partial answer as "stopped", exactly as a Stop always did). The relay runs once, in one producer task, so
usage, the ledger and the stored turn stay exactly-once however many clients attach.

Bounds: events of one response (bytes, oldest dropped first), all responses of one tenant (bytes, the oldest
response's oldest events first), all responses of this gateway (bytes, likewise), and time (a buffer is forgotten
`ttl_s` after its stream ended). Buffers live in this gateway process; with a shared stream log
(functions/chat/streams/shared_log.py) the events are also written through to the fleet's shared control state, so a
reconnect that reaches another gateway replica resumes there, and a Stop sent there stops the answer here.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import BaseModel, Field

from functions.chat.streams.shared_log import SharedStreamLog, StreamWriter
from shared.errors import FleetchatError, InvalidRequestError, NotFoundError
from shared.settings import Settings
from shared.storage.control_state import StreamRecord
from shared.wire.sse import DONE, sse_error
from shared.wire.sse import with_event_id as frame

log = logging.getLogger("fleetchat.resume")

STREAM_RESUMES = "fleetchat_gateway_stream_resumes"  # exposed as ..._total
RESUME_BUFFER_BYTES = "fleetchat_gateway_resume_buffer_bytes"
STREAM_DETACHES = "fleetchat_gateway_stream_detaches"  # exposed as ..._total
STREAM_TAKEOVERS = "fleetchat_gateway_stream_takeovers"  # exposed as ..._total

# Response headers a resumed stream repeats: what the first response said about the conversation and the request
# (rate-limit headers would be stale, so they are not repeated).
_REPEATED_HEADERS = ("x-conversation-id", "x-fleetchat-history", "x-request-id", "x-fleetchat-fallback-model")


class ResumeLimits(BaseModel):
    """How long and how much the gateway keeps for reconnecting clients (from Settings)."""

    grace_s: float = Field(default=15.0, ge=0)  # a dropped stream keeps generating this long; 0: a drop is a Stop
    ttl_s: float = Field(default=120.0, gt=0)  # an ended stream's events are kept this long
    response_max_bytes: int = Field(default=4 << 20, ge=1024)
    tenant_max_bytes: int = Field(default=32 << 20, ge=1024)
    total_max_bytes: int = Field(default=256 << 20, ge=1024)


class StreamNotFoundError(NotFoundError):
    default_code = "stream_not_found"


class StreamEventsGoneError(FleetchatError):
    """The response is known but the events after `Last-Event-ID` were dropped (bounds): resuming cannot be exact."""

    status_code = 410
    error_type = "invalid_request_error"
    default_code = "stream_events_expired"


class ResponseStoppedError(FleetchatError):
    """In-band only: ends a stream that was cancelled (or abandoned) for anyone still attached or resuming."""

    status_code = 409
    error_type = "invalid_request_error"
    default_code = "response_stopped"


class ResumeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.resumes = Counter(
            STREAM_RESUMES,
            "Stream resume requests by outcome: resumed, resumed_elsewhere (a stream another gateway replica "
            "generates, read from the shared log), not_found (unknown, expired or another tenant's), gone (the missed "
            "events were dropped by the buffer bounds).",
            ["outcome"],
            registry=registry,
        )
        self.buffer_bytes = Gauge(RESUME_BUFFER_BYTES, "Bytes of SSE events held for resuming.", registry=registry)
        self.detaches = Counter(
            STREAM_DETACHES,
            "Streams left by their last client before the end, by what followed: resumed, finished (generated to "
            "the end unattended), abandoned (the grace period ran out: aborted), cancelled (an explicit stop).",
            ["outcome"],
            registry=registry,
        )
        self.takeovers = Counter(
            STREAM_TAKEOVERS,
            "Streams this gateway took over from a gateway that went silent mid-answer, by outcome: finished (the "
            "answer continued to its end here), closed (not continued: its books closed as for a Stop; the client "
            "does not resume or the answer is not plain text), failed (it could not be continued: the client got an "
            "error event).",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("finished", "closed", "failed"):
            self.takeovers.labels(outcome)
        for outcome in ("resumed", "resumed_elsewhere", "not_found", "gone"):
            self.resumes.labels(outcome)


# The request header by which a client asks that a dropped connection not stop its answer (the web chat sends it).
RESUMABLE_HEADER = "x-fleetchat-resumable"
# Its values that ask: `true` as documented, and the other usual spellings of yes (aiperf's --header turns a bare
# `true` into a boolean and refuses it; `yes` reaches the server as written).
RESUMABLE_YES = frozenset({"true", "1", "yes", "on"})


def asks_resumable(value: str | None) -> bool:
    """Whether a request's RESUMABLE_HEADER value asks for a resumable answer."""
    return (value or "").strip().lower() in RESUMABLE_YES


# A new stream's first client attaches as its response starts; a stream nobody attached to by then is abandoned.
FIRST_ATTACH_S = 10.0


@dataclass(eq=False)
class ResumableStream:
    """One streamed response: its replay buffer, the task generating it, and the clients attached to it."""

    tenant_id: str
    headers: dict[str, str]
    _registry: ResumableStreams
    order: int  # creation order: the oldest response's events are dropped first
    completion_id: str = ""
    request_id: str = ""
    events: deque[tuple[int, bytes]] = field(default_factory=deque)
    next_seq: int = 1
    size: int = 0
    ended_at: float | None = None
    saw_done: bool = False
    attached: int = 0
    left: bool = False  # its last client detached before the end
    producer: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    # How long a drop keeps generating: the deployment's grace for a client that asked to resume (the web chat), 0 for
    # any other (the OpenAI semantics the SDKs expect: a closed connection stops the answer and its billing).
    grace_s: float = 0.0
    _grace: asyncio.TimerHandle | None = None
    _cancelled: bool = False
    writer: StreamWriter | None = None  # its copy in the fleet's shared log, if there is one
    written: int = 0  # with a writer: the last event in the shared log (clients see no further)
    _expiring: asyncio.Task[None] | None = None  # asking the fleet whether a client reads it elsewhere

    @property
    def first_seq(self) -> int:
        """The oldest event id still held (next_seq when none is)."""
        return self.events[0][0] if self.events else self.next_seq

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    @property
    def visible_seq(self) -> int:
        """The last event clients may see: with a shared log, the last one written there (so another gateway holds
        everything a client saw), else the last one generated."""
        return min(self.written, self.next_seq - 1) if self.writer is not None else self.next_seq - 1

    def release(self, seq: int) -> None:
        """The shared log holds the events up to `seq` (or they were released without it): clients may see them."""
        if seq > self.written:
            self.written = seq
            self._notify()

    def check_resumable(self, after: int) -> None:
        """Raise unless the events after `after` can be replayed exactly."""
        if after >= self.next_seq:
            raise InvalidLastEventIdError(after, self.next_seq - 1)
        if after + 1 < self.first_seq:
            raise StreamEventsGoneError(
                "The events after this Last-Event-ID are no longer held; read the stored conversation instead.",
                param="Last-Event-ID",
            )

    async def attach(self, after: int = 0) -> AsyncIterator[bytes]:
        """The framed events after `after`, then the live ones, until the stream ends. Leaving (the client's
        connection closed) detaches; the last client to leave starts the grace period."""
        self.attached += 1
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        if self.left:
            self.left = False
            self._registry.metrics.detaches.labels("resumed").inc()
        cursor = after
        try:
            while True:
                if cursor + 1 < self.first_seq:  # this client fell behind the byte bounds: say so, never cut silently
                    gone = StreamEventsGoneError("This stream fell too far behind; read the stored conversation.")
                    yield frame(self.next_seq, sse_error(gone))  # ids past the buffer's: nothing resumes after them
                    yield frame(self.next_seq + 1, DONE)
                    return
                # Indexing a deque near its right end is cheap: a live client reads the newest events.
                visible = self.visible_seq
                pending = [self.events[i] for i in range(cursor + 1 - self.first_seq, visible + 1 - self.first_seq)]
                for seq, event in pending:
                    cursor = seq
                    yield frame(seq, event)
                if self.ended and cursor >= self.next_seq - 1:
                    return
                if not pending:
                    changed = self._changed
                    await changed.wait()
        finally:
            self.attached -= 1
            if self.attached == 0 and not self.ended:
                self.left = True
                self._registry.detached(self)

    async def cancel(self) -> bool:
        """Stop generating (an explicit Stop); True when this call stopped it, False when it had already ended."""
        if self.producer is None or self.producer.done():
            return False
        self._cancelled = True
        self.producer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(self.producer)
        return True

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()


class InvalidLastEventIdError(FleetchatError):
    status_code = 400
    error_type = "invalid_request_error"
    default_code = "invalid_last_event_id"

    def __init__(self, after: int, last: int) -> None:
        super().__init__(f"Last-Event-ID {after} is past this stream's last event ({last}).", param="Last-Event-ID")


class ResumableStreams:
    """Every resumable response of this gateway, by (tenant, completion id); another tenant's id is not found."""

    def __init__(
        self,
        limits: ResumeLimits,
        metrics: ResumeMetrics,
        clock: Callable[[], float] = time.monotonic,
        *,
        shared: SharedStreamLog | None = None,
    ) -> None:
        self.limits = limits
        self.metrics = metrics
        self.clock = clock
        self.shared = shared
        self._by_shared_id: dict[str, ResumableStream] = {}
        self._streams: dict[int, ResumableStream] = {}  # by creation order
        self._by_id: dict[tuple[str, str], ResumableStream] = {}
        self._tenant_bytes: dict[str, int] = {}
        self._total = 0
        self._order = itertools.count()

    # -- the producer side -------------------------------------------------------------------------------------------
    def open(self, tenant_id: str, headers: dict[str, str], takeover: dict[str, Any] | None = None) -> ResumableStream:
        """A new buffer (not yet generating: see `start`)."""
        self.sweep()
        kept = {name: value for name, value in headers.items() if name.lower() in _REPEATED_HEADERS}
        stream = ResumableStream(tenant_id, kept, self, next(self._order))
        self._streams[stream.order] = stream
        # Findable by its request id from the first byte of the response on (a client can stop or resume it before
        # the first chunk named the completion), and by the completion id once that is known.
        request_id = next((value for name, value in kept.items() if name.lower() == "x-request-id"), None)
        if request_id:
            stream.request_id = request_id
            self._by_id[(tenant_id, request_id)] = stream
        if self.shared is not None:
            stream.writer = self.shared.writer(
                tenant_id,
                kept,
                [request_id] if request_id else [],
                takeover=takeover,
                on_written=stream.release,
                on_fenced=lambda: stream.producer.cancel() if stream.producer is not None else None,
            )
            self._by_shared_id[stream.writer.stream_id] = stream
        return stream

    def start(
        self,
        tenant_id: str,
        events: AsyncIterator[bytes],
        completion_id: Callable[[], str],
        headers: dict[str, str],
        on_end: Callable[[], None] | None = None,
        *,
        resumable: bool = False,
        takeover: dict[str, Any] | None = None,
    ) -> ResumableStream:
        """Generate `events` (the relay's output) in a task of its own into a new buffer. `completion_id` says the
        response's id once its first chunk was seen; the buffer is findable from then on. Only a `resumable` stream
        (its client asked for it) keeps generating through a drop; any stream can be resumed while it generates.
        `takeover`: what another gateway needs to finish it if this one dies (functions/chat/streams/takeover.py)."""
        stream = self.open(tenant_id, headers, takeover)
        stream.grace_s = self.limits.grace_s if resumable else 0.0

        async def produce() -> None:
            try:
                async for event in events:
                    self.append(stream, event)
                    if not stream.completion_id and (found := completion_id()):
                        self.register(stream, found)
            except Exception:
                log.exception("stream generation failed")
            finally:
                self.end(stream)
                if on_end is not None:
                    on_end()
                if stream.writer is not None:
                    await stream.writer.finish()

        stream.producer = asyncio.get_running_loop().create_task(produce())
        # Until the first client attaches, the stream is as good as dropped (a client gone before it read a byte).
        self.detached(stream)
        return stream

    def register(self, stream: ResumableStream, completion_id: str) -> None:
        stream.completion_id = completion_id
        if stream.writer is not None:
            stream.writer.name(completion_id)
        key = (stream.tenant_id, completion_id)
        previous = self._by_id.get(key)
        if previous is not None and previous is not stream:
            log.warning("a second live response with the same completion id: only the newer one can be resumed")
        self._by_id[key] = stream

    def append(self, stream: ResumableStream, event: bytes) -> None:
        if event == DONE:
            stream.saw_done = True
        if stream.writer is not None:
            stream.writer.add(stream.next_seq, event)
        stream.events.append((stream.next_seq, event))
        stream.next_seq += 1
        self._grow(stream, len(event))
        limits = self.limits
        while stream.size > limits.response_max_bytes and len(stream.events) > 1:
            self._drop_oldest(stream)
        tenant = stream.tenant_id
        self._trim(lambda s: s.tenant_id == tenant, lambda: self._tenant_bytes.get(tenant, 0), "tenant")
        self._trim(lambda s: True, lambda: self._total, "total")
        self.metrics.buffer_bytes.set(self._total)
        stream._notify()

    def end(self, stream: ResumableStream) -> None:
        """The producer finished: a stream that did not end with [DONE] (stopped, or failed) ends with an error
        event and [DONE] for whoever reads it (never a silent cut)."""
        finished = stream.saw_done
        if not finished:
            if stream._cancelled or stream.left:
                error = ResponseStoppedError("This response was stopped before it finished.")
            else:
                error = ResponseStoppedError("This response ended unexpectedly.", code="response_failed")
            self.append(stream, sse_error(error))
            self.append(stream, DONE)
        if stream._grace is not None:
            stream._grace.cancel()
            stream._grace = None
        if stream.left and not stream._cancelled:
            self.metrics.detaches.labels("finished" if finished else "abandoned").inc()
        stream.ended_at = self.clock()
        stream._notify()

    def detached(self, stream: ResumableStream) -> None:
        """No client is attached: keep generating for the grace period, then abort (an abandoned answer)."""
        if stream.ended or stream.producer is None:
            return
        # Before its first client attached, a stream waits at least FIRST_ATTACH_S: its response is on its way out.
        grace = stream.grace_s if stream.left else max(stream.grace_s, FIRST_ATTACH_S)

        def expire() -> None:
            stream._grace = None
            if stream.attached == 0 and stream.producer is not None and not stream.producer.done():
                if stream.writer is None:
                    stream.producer.cancel()
                else:  # its client may have come back through another gateway replica
                    stream._expiring = loop.create_task(self._expire_unless_read_elsewhere(stream, stream.writer))

        loop = asyncio.get_running_loop()
        stream._grace = loop.call_soon(expire) if grace <= 0 else loop.call_later(grace, expire)

    async def _expire_unless_read_elsewhere(self, stream: ResumableStream, writer: StreamWriter) -> None:
        assert self.shared is not None
        try:
            elsewhere = await self.shared.attached_elsewhere(writer.stream_id)
        except Exception:
            elsewhere = False  # the store cannot say: the grace period is all a client was promised
        if stream.attached > 0 or stream.producer is None or stream.producer.done():
            return
        if elsewhere:
            self.detached(stream)  # another grace period: checked again at its end
        else:
            stream.producer.cancel()

    async def apply_stops(self) -> None:
        """A fleet sync step: stop this gateway's streams whose Stop reached another replica."""
        assert self.shared is not None
        for stream_id in await self.shared.stops_for(self.shared.fleet.instance_id):
            stream = self._by_shared_id.get(stream_id)
            if stream is not None and await stream.cancel():
                self.metrics.detaches.labels("cancelled").inc()

    # -- the client side ---------------------------------------------------------------------------------------------
    async def resume_anywhere(
        self, tenant_id: str, completion_id: str, after: int
    ) -> tuple[AsyncIterator[bytes], dict[str, str]]:
        """The events after `after` and the headers to repeat: from this gateway's buffer, or from the shared log when
        another replica generates the stream (or generated it)."""
        if self.shared is None or self._held(tenant_id, completion_id) is not None:
            stream = self.resume(tenant_id, completion_id, after)
            return stream.attach(after), stream.headers
        try:
            record = await self._shared_record(tenant_id, completion_id)
        except StreamNotFoundError:
            self.metrics.resumes.labels("not_found").inc()
            raise
        if after + 1 < record.first_seq:
            self.metrics.resumes.labels("gone").inc()
            raise StreamEventsGoneError(
                "The events after this Last-Event-ID are no longer held; read the stored conversation instead.",
                param="Last-Event-ID",
            )
        if record.ended and after >= record.next_seq:
            raise InvalidLastEventIdError(after, record.next_seq - 1)
        self.metrics.resumes.labels("resumed_elsewhere").inc()
        return self.shared.tail(record, after), record.headers

    async def cancel_anywhere(self, tenant_id: str, completion_id: str) -> bool:
        """Stop generating, here or on the replica that generates it; True when this call stopped it."""
        if self.shared is None or self._held(tenant_id, completion_id) is not None:
            return await self.cancel(tenant_id, completion_id)
        return await self.shared.request_stop(await self._shared_record(tenant_id, completion_id))

    def _held(self, tenant_id: str, completion_id: str) -> ResumableStream | None:
        self.sweep()
        return self._by_id.get((tenant_id, completion_id))

    async def _shared_record(self, tenant_id: str, completion_id: str) -> StreamRecord:
        assert self.shared is not None
        record = await self.shared.find(tenant_id, completion_id)
        if record is None:
            raise StreamNotFoundError(
                f"No resumable stream '{completion_id}': it is unknown or expired.", param="completion_id"
            )
        return record

    def find(self, tenant_id: str, completion_id: str) -> ResumableStream:
        stream = self._held(tenant_id, completion_id)
        if stream is None:
            raise StreamNotFoundError(
                f"No resumable stream '{completion_id}': it is unknown, expired, or held by another gateway replica.",
                param="completion_id",
            )
        return stream

    def resume(self, tenant_id: str, completion_id: str, after: int) -> ResumableStream:
        """The stream to replay after event `after`, or the error a client gets (counted either way)."""
        try:
            stream = self.find(tenant_id, completion_id)
            stream.check_resumable(after)
        except StreamNotFoundError:
            self.metrics.resumes.labels("not_found").inc()
            raise
        except StreamEventsGoneError:
            self.metrics.resumes.labels("gone").inc()
            raise
        self.metrics.resumes.labels("resumed").inc()
        return stream

    async def cancel(self, tenant_id: str, completion_id: str) -> bool:
        stream = self.find(tenant_id, completion_id)
        stopped = await stream.cancel()
        if stopped:
            self.metrics.detaches.labels("cancelled").inc()
        return stopped

    # -- bounds ------------------------------------------------------------------------------------------------------
    def sweep(self) -> None:
        """Forget streams that ended more than `ttl_s` ago."""
        now = self.clock()
        for stream in [s for s in self._streams.values() if s.ended_at is not None]:
            if now - stream.ended_at >= self.limits.ttl_s:  # type: ignore[operator]
                self._forget(stream)
        self.metrics.buffer_bytes.set(self._total)

    async def aclose(self) -> None:
        """Gateway shutdown: abort what is still generating (each relay closes its books as for a Stop)."""
        running = [s.producer for s in self._streams.values() if s.producer is not None and not s.producer.done()]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    @property
    def total_bytes(self) -> int:
        return self._total

    def tenant_bytes(self, tenant_id: str) -> int:
        return self._tenant_bytes.get(tenant_id, 0)

    def _trim(self, belongs: Callable[[ResumableStream], bool], used: Callable[[], int], scope: str) -> None:
        limit = self.limits.tenant_max_bytes if scope == "tenant" else self.limits.total_max_bytes
        if used() <= limit:
            return
        for stream in list(self._streams.values()):  # oldest response first
            if not belongs(stream):
                continue
            while stream.events and used() > limit:
                self._drop_oldest(stream)
            if stream.ended and not stream.events:
                self._forget(stream)
            if used() <= limit:
                return

    def _grow(self, stream: ResumableStream, size: int) -> None:
        stream.size += size
        self._tenant_bytes[stream.tenant_id] = self._tenant_bytes.get(stream.tenant_id, 0) + size
        self._total += size

    def _drop_oldest(self, stream: ResumableStream) -> None:
        _, event = stream.events.popleft()
        self._grow(stream, -len(event))

    def _forget(self, stream: ResumableStream) -> None:
        while stream.events:
            self._drop_oldest(stream)
        self._streams.pop(stream.order, None)
        if stream.writer is not None:
            self._by_shared_id.pop(stream.writer.stream_id, None)
        for name in (stream.completion_id, stream.request_id):
            key = (stream.tenant_id, name)
            if self._by_id.get(key) is stream:
                del self._by_id[key]
        if self._tenant_bytes.get(stream.tenant_id) == 0:
            del self._tenant_bytes[stream.tenant_id]


def parse_last_event_id(value: str | None) -> int:
    """`Last-Event-ID` as an event number (absent: 0, replay from the start); a 400 for anything else."""
    if value is None or value.strip() == "":
        return 0
    text = value.strip()
    if not text.isdigit() or len(text) > 18:
        raise InvalidRequestError("Last-Event-ID must be the number of the last event received.", param="Last-Event-ID")
    return int(text)


def limits_from(settings: Settings) -> ResumeLimits:
    return ResumeLimits(
        grace_s=settings.resume.grace_s,
        ttl_s=settings.resume.buffer_ttl_s,
        response_max_bytes=settings.resume.response_max_bytes,
        tenant_max_bytes=settings.resume.tenant_max_bytes,
        total_max_bytes=settings.resume.total_max_bytes,
    )

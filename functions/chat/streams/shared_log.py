"""Resumable streams across gateway replicas: each stream's events written through to the shared control state, so a
client that reconnects to any gateway gets the events after its `Last-Event-ID`, in order, then the live ones.

The generating gateway (the owner) keeps its in-memory buffer for its own clients and writes the events in batches,
at most every `flush_s` (one request per batch: the cost per response is stated in `make bench`). Another gateway
serving a resume reads the store and polls it every `poll_s` until the stream ended; while it does, it marks the
stream attached, so the owner does not take the client for gone and abort the answer after its grace period. A Stop
sent to another gateway reaches the owner through its next sync round. When the owner dies mid-stream (no heartbeat
for `liveness_s`), a resumed stream ends with an error event and `[DONE]`, never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from functions.control.fleet_sync import FleetSync
from shared.errors import FleetchatError
from shared.settings import ControlStateSettings
from shared.storage.control_state import ControlState, StreamEvent, StreamOpen, StreamRecord
from shared.storage.conversations import StoreUnavailableError
from shared.wire.sse import DONE, sse_error
from shared.wire.sse import with_event_id as frame

log = logging.getLogger("fleetchat.resume")

# Streams that may need another gateway to finish them: key = stream id, value = {"owner", "tenant"}
# (functions/chat/streams/takeover.py).
LIVE = "live-streams"
STOPS = "stream-stops"  # key: a stream id whose owner should stop generating; value: {"owner": instance id}
ATTACHED = "stream-attached"  # key: a stream id a client reads on another gateway; value: {"by": instance id}
_READ_BATCH = 256
_EVERYTHING = 1 << 62


class StreamLostError(FleetchatError):
    """In-band only: the stream cannot go on here (its events expired, or the gateway generating it stopped)."""

    status_code = 502
    error_type = "server_error"
    default_code = "response_failed"


class StreamWriter:
    """One stream's events on their way to the shared store, written as they come (whatever arrived while a write was
    in flight goes in the next one), in order, and only then released to clients (`on_written`): the store holds every
    event a client saw, so another gateway can finish the answer exactly where it stopped. When the store fails, the
    events are released anyway (an answer never waits on the store) and retried every `retry_s`. A write refused
    because another gateway took the stream over (`fenced`) ends the writing (`on_fenced`)."""

    def __init__(
        self,
        shared: SharedStreamLog,
        opened: StreamOpen,
        names: list[str],
        *,
        opened_already: bool = False,
        on_written: Callable[[int], None] | None = None,
        on_fenced: Callable[[], None] | None = None,
    ) -> None:
        self._shared = shared
        self._opened = opened
        self._open_pending = not opened_already
        self._names = [] if opened_already else [opened.stream_id, *names]
        self._pending: list[StreamEvent] = []
        self._pending_bytes = 0
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._on_written = on_written
        self._on_fenced = on_fenced
        self.fenced = False

    @property
    def stream_id(self) -> str:
        return self._opened.stream_id

    def add(self, seq: int, data: bytes) -> None:
        if self.fenced:
            return
        self._pending.append(StreamEvent(seq=seq, data=data))
        self._pending_bytes += len(data)
        # The store is unreachable for a while: its copy keeps the newest, like the buffer's bounds (resuming from
        # before the dropped ones is then a 410, as it is locally).
        while self._pending_bytes > self._shared.max_bytes and len(self._pending) > 1:
            self._pending_bytes -= len(self._pending.pop(0).data)
        self._soon()

    def name(self, name: str) -> None:
        self._names.append(name)
        self._soon()

    def _soon(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while (self._pending or self._names or self._open_pending) and not self.fenced:
            if await self._flush(ended=False):
                continue
            self._release(self._pending[-1].seq if self._pending else 0)  # shown anyway: retried below
            if self._closing:
                return
            await asyncio.sleep(self._shared.settings.retry_s)

    async def flush(self) -> None:
        """Write what is pending, the stream not ended (this gateway stops; another may go on with it)."""
        self._closing = True
        if self._task is not None:
            await self._task

    async def finish(self) -> None:
        """The stream ended: write what is pending and mark it ended (its events kept for the TTL)."""
        self._closing = True
        if self._task is not None:
            await self._task
        if not self.fenced and not await self._flush(ended=True) and self._pending:
            self._release(self._pending[-1].seq)
        if self._opened.takeover is not None and not self.fenced:
            with contextlib.suppress(Exception):  # a stale entry is dropped by whoever finds its stream ended
                await self._shared.state.delete(LIVE, self.stream_id)

    def _release(self, seq: int) -> None:
        if self._on_written is not None and seq > 0:
            self._on_written(seq)

    async def _flush(self, *, ended: bool) -> bool:
        """One write of everything pending; False when the store failed (the events stay pending)."""
        state, opened = self._shared.state, self._opened
        events, names = self._pending, self._names
        self._pending, self._names, self._pending_bytes = [], [], 0
        try:
            if self._open_pending:
                await state.open_stream(opened, names)
                if opened.takeover is not None:  # listed until it ends, for another gateway to finish if this dies
                    await state.put(LIVE, opened.stream_id, {"owner": opened.owner, "tenant": opened.tenant_id})
                self._open_pending = False
            else:
                for name in names:
                    await state.name_stream(opened.tenant_id, name, opened.stream_id)
            names = []
            if events or ended:
                written = await state.append_events(
                    opened.stream_id,
                    opened.owner,
                    events,
                    ended=ended,
                    max_bytes=self._shared.max_bytes,
                    ttl_s=self._shared.ttl_s,
                )
                if not written:  # another gateway took the stream over: this one must stop
                    self.fenced = True
                    log.warning("stream %s was taken over by another gateway; stopping here", opened.stream_id)
                    self._release(_EVERYTHING)  # what this gateway's own clients wait for is theirs to see
                    if self._on_fenced is not None:
                        self._on_fenced()
            if events:
                self._release(events[-1].seq)
            return True
        except Exception:
            log.warning("a stream's events could not reach the shared control state; retried", exc_info=True)
            self._pending = events + self._pending
            self._pending_bytes = sum(len(e.data) for e in self._pending)
            self._names = names + self._names
            return False


class SharedStreamLog:
    """The fleet's view of resumable streams: writers for this gateway's streams, readers for the others'."""

    def __init__(
        self,
        state: ControlState,
        fleet: FleetSync,
        settings: ControlStateSettings,
        *,
        max_bytes: int,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = state
        self.fleet = fleet
        self.settings = settings
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self.clock = clock

    def writer(
        self,
        tenant_id: str,
        headers: dict[str, str],
        names: list[str],
        *,
        takeover: dict[str, Any] | None = None,
        on_written: Callable[[int], None] | None = None,
        on_fenced: Callable[[], None] | None = None,
    ) -> StreamWriter:
        opened = StreamOpen(
            stream_id=f"st-{uuid.uuid4().hex}",
            tenant_id=tenant_id,
            owner=self.fleet.instance_id,
            headers=headers,
            takeover=takeover,
        )
        return StreamWriter(self, opened, names, on_written=on_written, on_fenced=on_fenced)

    async def find(self, tenant_id: str, name: str) -> StreamRecord | None:
        return await self.state.find_stream(tenant_id, name)

    async def attached_elsewhere(self, stream_id: str) -> bool:
        """Whether a client reads this stream on another gateway now (so the owner keeps generating)."""
        return stream_id in await self.state.records(ATTACHED)

    async def request_stop(self, record: StreamRecord) -> bool:
        """Ask the owner to stop generating; True once it ended (within a few sync rounds), False if it had already."""
        if record.ended:
            return False
        await self.state.put(STOPS, record.stream_id, {"owner": record.owner}, ttl_s=self.settings.liveness_s * 2)
        deadline = self.clock() + 2 * self.settings.sync_s + 1.0
        while self.clock() < deadline:
            current = await self.state.find_stream(record.tenant_id, record.stream_id)
            if current is None or current.ended or not await self.fleet.is_alive(record.owner):
                break
            await asyncio.sleep(self.settings.poll_s)
        return True

    async def stops_for(self, owner: str) -> list[str]:
        """The stream ids whose Stop was sent to another gateway, for `owner` to act on (each taken once)."""
        wanted = [key for key, value in (await self.state.records(STOPS)).items() if value.get("owner") == owner]
        for stream_id in wanted:
            await self.state.delete(STOPS, stream_id)
        return wanted

    async def tail(self, record: StreamRecord, after: int) -> AsyncIterator[bytes]:
        """The framed events after `after`, then new ones as the owner writes them, until the stream ends."""
        state, settings = self.state, self.settings
        cursor, marked_at = after, float("-inf")
        failing_since: float | None = None
        orphaned_since: float | None = None
        while True:
            try:
                if self.clock() - marked_at >= settings.sync_s:
                    await state.put(
                        ATTACHED, record.stream_id, {"by": self.fleet.instance_id}, ttl_s=settings.liveness_s
                    )
                    marked_at = self.clock()
                batch = await state.read_events(record.stream_id, cursor, _READ_BATCH)
                current = None if batch else await state.find_stream(record.tenant_id, record.stream_id)
                failing_since = None
            except StoreUnavailableError:
                failing_since = self.clock() if failing_since is None else failing_since
                if self.clock() - failing_since < settings.liveness_s:
                    await asyncio.sleep(settings.poll_s)
                    continue
                lost = StreamLostError("The shared stream store is unreachable; read the stored conversation.")
                yield _ending(cursor, lost)
                return
            if batch and batch[0].seq > cursor + 1:  # fell behind the store's byte bound
                yield _ending(cursor, StreamLostError("This stream fell too far behind; read the stored conversation."))
                return
            for event in batch:
                cursor = event.seq
                yield frame(event.seq, event.data)
            if batch:
                continue
            if current is None:
                yield _ending(cursor, StreamLostError("This stream expired; read the stored conversation."))
                return
            if current.ended and cursor >= current.next_seq - 1:
                return
            if not current.ended and not await self.fleet.is_alive(current.owner):
                # Another gateway takes over what it can within a few sync rounds (functions/chat/streams/takeover.py).
                orphaned_since = self.clock() if orphaned_since is None else orphaned_since
                if current.takeover is None or self.clock() - orphaned_since > 2 * settings.sync_s + 1.0:
                    lost = StreamLostError("The gateway generating this response stopped before it finished.")
                    yield _ending(cursor, lost)
                    return
            else:
                orphaned_since = None
            await asyncio.sleep(settings.poll_s)


def _ending(cursor: int, error: FleetchatError) -> bytes:
    """An error event and [DONE], numbered after the last event the client got."""
    return frame(cursor + 1, sse_error(error)) + frame(cursor + 2, DONE)

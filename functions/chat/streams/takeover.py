"""Finishing an answer whose gateway died: another gateway replica takes the stream over and continues it where the
client's events stopped, so a `kill -9` of a gateway mid-answer loses nothing a client was promised.

When a resumable stream starts, its gateway records what finishing it needs (`TakeoverSpec`: the worker request, the
caller, the admission reservation and the conversation turn) with the stream in the shared control state, and lists
it as live. The shared log holds every event a client saw (functions/chat/streams/shared_log.py writes before it
releases). Every sync round each gateway looks for live streams whose owner is silent; one of them wins the claim
(an atomic owner swap: the dead owner, should it come back, is fenced out) and runs the rest of the answer: the text
so far is read back from the shared events, the pool continues it as an open assistant message (the same mechanism
as a replica's death, functions/chat/streams/continuation.py), and the new events go through the safety post-filter
and the relay, which closes the books once: the ledger entry under the original request id, the reservation
settled, the turn stored. Clients attached anywhere read the continuation from the shared log.

What is continued: resumable plain-text answers. Any other streamed answer of a dead gateway (a client that does not
resume, as the `openai` SDK; tool calls, a structured-output contract, retrieval citations) has its books closed as for
a Stop, which is what its client's closed connection means: what was generated billed (aborted), the partial answer
stored as stopped, and a `response_stopped` error event and `[DONE]` for any reader. Answers served from the result
cache are not listed (nothing generated, nothing to bill).
Usage of a taken-over answer: the continuing leg's prompt (the original prompt and the partial answer) and
completion tokens are exact; the split of the partial answer between them counts one token per content chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import asdict
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from functions.accounts.auth import Caller
from functions.chat.conversation_turns import ConversationTurns, History, Turn
from functions.chat.streams.capture import StreamCapture
from functions.chat.streams.continuation import (
    BROKE_MESSAGE,
    AnswerSoFar,
    ContinuingStream,
    Leg,
    continuation_body,
)
from functions.chat.streams.relay import StreamRelay
from functions.chat.streams.resumable import ResponseStoppedError, ResumeMetrics
from functions.chat.streams.shared_log import LIVE, SharedStreamLog, StreamWriter
from functions.control.admission import Reservation
from functions.control.request_accounting import Accounting, RequestAccount
from functions.metrics.gateway import GatewayMetrics
from functions.safety.pipeline import SafetyPipeline
from functions.worker_client import WorkerClient
from shared.errors import FleetchatError, UpstreamError
from shared.storage.accounts import ApiKeyRecord, Tenant
from shared.storage.control_state import StreamOpen, StreamRecord
from shared.storage.conversations import StoredMessage
from shared.wire.responses_api import ResponseRecord
from shared.wire.retrieval_api import Citation
from shared.wire.sse import DONE, sse_error

log = logging.getLogger("fleetchat.takeover")

_READ_BATCH = 512


class TurnSpec(BaseModel):
    conversation_id: str
    expected_version: int
    render_version: int
    new_messages: list[StoredMessage]
    rendered: list[dict[str, Any]]
    history: History
    title: str | None = None
    parent: int | None = None  # conversation_turns.Turn.parent / pinned
    pinned: bool = False
    keep: int | None = None  # written by gateways before the message tree (an edit kept `keep` messages): read only
    citations: list[Citation] | None = None
    response: ResponseRecord | None = None  # a Responses API answer's record (functions/responses)
    fork_to: str | None = None  # conversation_turns.Turn.fork_to / fork_at
    fork_at: int | None = None

    def place(self) -> tuple[int | None, bool]:
        """(parent, pinned) of the turn; an older gateway's edit kept `keep` messages: it goes beside message `keep`,
        under the one before it (for a conversation without branches the two mean the same)."""
        return (self.keep - 1, True) if self.keep is not None else (self.parent, self.pinned)


class TakeoverSpec(BaseModel):
    """What another gateway needs to finish a stream (stored with it; JSON)."""

    request_id: str
    tenant: Tenant
    key: ApiKeyRecord
    via_session: bool = False
    pool: str
    model_version: str | None = None
    replicas: list[str]
    body: dict[str, Any]
    headers: dict[str, str]
    reservation: dict[str, Any]
    prompt_estimate: int
    client_usage: bool
    turn: TurnSpec | None = None
    continues: bool = True  # continue the answer (a resumable plain-text one); False: close its books as a Stop


def takeover_spec(
    account: RequestAccount, turn: Turn | None, leg: Leg, *, client_usage: bool, continues: bool
) -> dict[str, Any]:
    """The spec of a streamed answer about to be relayed (JSON-ready)."""
    reservation = asdict(account.reservation)
    if reservation.get("message_at") is not None:
        reservation["message_at"] = reservation["message_at"].isoformat()
    turn_spec = None
    if turn is not None:
        turn_spec = TurnSpec(
            conversation_id=turn.conversation_id,
            expected_version=turn.expected_version,
            render_version=turn.render_version,
            new_messages=turn.new_messages,
            rendered=list(turn.rendered),
            history=turn.history,
            title=turn.title,
            parent=turn.parent,
            pinned=turn.pinned,
            citations=turn.citations,
            response=turn.response,
            fork_to=turn.fork_to,
            fork_at=turn.fork_at,
        )
    spec = TakeoverSpec(
        request_id=account.request_id,
        tenant=account.caller.tenant,
        key=account.caller.key,
        via_session=account.caller.via_session,
        pool=leg.pool,
        model_version=account.model_version,
        replicas=list(leg.replicas),
        body=leg.body,
        headers=leg.headers,
        reservation=reservation,
        prompt_estimate=account.prompt_estimate,
        client_usage=client_usage,
        turn=turn_spec,
        continues=continues,
    )
    return spec.model_dump(mode="json")


class StreamTakeovers:
    """Finds the fleet's orphaned streams every sync round and finishes the ones this gateway wins."""

    def __init__(
        self,
        shared: SharedStreamLog,
        workers: WorkerClient,
        accounting: Accounting,
        turns: ConversationTurns,
        safety: SafetyPipeline,
        metrics: GatewayMetrics,
        resume_metrics: ResumeMetrics,
    ) -> None:
        self.shared = shared
        self.workers = workers
        self.accounting = accounting
        self.turns = turns
        self.safety = safety
        self.metrics = metrics
        self.resume_metrics = resume_metrics
        self._running: set[asyncio.Task[None]] = set()
        self._closed = False

    async def adopt_orphans(self) -> None:
        """A fleet sync step: claim every live stream whose owner went silent, and finish it here (not once this
        gateway is shutting down: its HTTP client is about to close; another gateway takes them)."""
        if self._closed:
            return
        state, fleet = self.shared.state, self.shared.fleet
        fresh: set[str] | None = None
        for stream_id, live in (await state.records(LIVE)).items():
            owner, tenant = str(live.get("owner", "")), str(live.get("tenant", ""))
            if fleet.seen_alive(owner):
                continue
            if fresh is None:  # a gateway started since this round's heartbeat read: read once for every stream
                fresh = await fleet.members()
            if owner in fresh:
                continue
            record = await state.find_stream(tenant, stream_id)
            if record is None or record.ended or record.takeover is None:
                await state.delete(LIVE, stream_id)
                continue
            if record.owner != owner or not await state.claim_stream(stream_id, owner, fleet.instance_id):
                continue  # another gateway won it
            await state.put(LIVE, stream_id, {"owner": fleet.instance_id, "tenant": tenant})
            log.warning("taking over stream %s from gateway %s (silent)", stream_id, owner)
            # Read again now that the old owner is fenced out: nothing it wrote before the claim is missed.
            mine = await state.find_stream(tenant, stream_id) or record.model_copy(update={"owner": fleet.instance_id})
            task = asyncio.get_running_loop().create_task(self._finish(mine), name=f"takeover-{stream_id}")
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def aclose(self) -> None:
        self._closed = True
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)

    async def _finish(self, record: StreamRecord) -> None:
        opened = StreamOpen(
            stream_id=record.stream_id, tenant_id=record.tenant_id, owner=record.owner, headers=record.headers
        )
        writer = StreamWriter(self.shared, opened, [], opened_already=True)
        spec = TakeoverSpec.model_validate(record.takeover)
        seq, outcome = record.next_seq, "finished" if spec.continues else "closed"
        try:
            async for event in self._continued(record, spec):
                writer.add(seq, event)
                seq += 1
        except _AlreadyEnded:  # its gateway died after writing [DONE], before marking the stream ended
            outcome = "ended"
        except asyncio.CancelledError:  # this gateway is stopping: what was written stays, listed for another to finish
            await writer.flush()
            raise
        except Exception:
            log.exception("taking over stream %s failed", record.stream_id)
            outcome = "failed"
            for event in (sse_error(UpstreamError("This response could not be finished.")), DONE):
                writer.add(seq, event)
                seq += 1
        await writer.finish()
        self.resume_metrics.takeovers.labels(outcome).inc()
        with contextlib.suppress(Exception):
            await self.shared.state.delete(LIVE, record.stream_id)

    async def _continued(self, record: StreamRecord, spec: TakeoverSpec) -> AsyncIterator[bytes]:
        """The rest of the answer as the client gets it, the books closed once at its end (or at once, as for a Stop,
        for an answer that is not continued)."""
        held = await self._held(record)
        if DONE in held:
            # Its books were closed (billed, turn stored) before [DONE] was written: only the end mark is missing.
            raise _AlreadyEnded
        if record.first_seq != 1:
            raise UpstreamError("The start of this answer is no longer held; it cannot be continued.")
        capture = StreamCapture(client_wants_usage=spec.client_usage)
        answer = AnswerSoFar()
        for event in held:
            capture.relay(event)
            answer.observe(event)
        caller = Caller(spec.tenant, spec.key, spec.via_session)
        held_reservation = dict(spec.reservation)
        if isinstance(held_reservation.get("message_at"), str):
            held_reservation["message_at"] = datetime.fromisoformat(held_reservation["message_at"])
        held_reservation["scopes"] = tuple(held_reservation.get("scopes") or ())
        reservation = Reservation(**held_reservation)
        account = RequestAccount(spec.request_id, caller, spec.pool, reservation, spec.prompt_estimate, self.accounting)
        account.model_version = spec.model_version
        turn = None
        if spec.turn is not None:
            t = spec.turn
            parent, pinned = t.place()
            turn = Turn(spec.tenant, t.conversation_id, t.expected_version, t.render_version, t.new_messages,
                        t.rendered, t.history, t.title, None, parent, pinned, t.citations, t.response,
                        fork_to=t.fork_to, fork_at=t.fork_at)  # fmt: skip
        guard = self.safety.guard(caller)
        if capture.text:
            guard.check(capture.text)  # the post-filter reads the new text after what was already sent
        relay = StreamRelay(capture, account, self.turns, turn, self.metrics, self.safety, guard)
        if not spec.continues:  # its client's connection closed with the gateway: a Stop
            await relay.close_as_stopped()
            yield sse_error(ResponseStoppedError("The gateway generating this response stopped; so did the answer."))
            yield DONE
            return
        async for event in relay.run(await self._rest(spec, answer, capture.content_chunks)):
            yield event

    async def _rest(self, spec: TakeoverSpec, answer: AnswerSoFar, generated: int) -> AsyncGenerator[bytes, None]:
        """The worker events that finish the answer; when no replica can continue it, an error event and [DONE], so
        the relay still closes the books once (what was generated billed, the partial answer stored as failed)."""
        body = continuation_body(spec.body, answer.text, generated)
        if body is None:  # the completion budget was spent exactly when the gateway died: the answer ends by length
            return _ended_by_length(answer, generated, spec.prompt_estimate)
        replicas = self.workers.breakers.order(spec.pool, spec.replicas)
        try:
            first = await self.workers.open_stream(spec.pool, replicas, body, spec.headers)
        except FleetchatError as exc:
            log.warning("stream of request %s cannot be continued: %s", spec.request_id, type(exc).__name__)
            return _failed()
        answer.leg_completion = answer.repeated_in_prompt = generated
        answer.next_leg({"pool": spec.pool, "fallback": False, "gateway": True})
        continuing = ContinuingStream(first, Leg(spec.pool, spec.replicas, spec.body, spec.headers), self.workers)
        continuing.answer = answer
        return continuing.events()

    async def _held(self, record: StreamRecord) -> list[bytes]:
        """Every event the shared log holds for the stream (from its first held one)."""
        events: list[bytes] = []
        after = 0
        while True:
            batch = await self.shared.state.read_events(record.stream_id, after, _READ_BATCH)
            if not batch:
                return events
            events += [event.data for event in batch]
            after = batch[-1].seq


class _AlreadyEnded(Exception):
    """A silent gateway's stream had in fact ended: nothing to finish."""


async def _failed() -> AsyncGenerator[bytes, None]:
    yield sse_error(UpstreamError(BROKE_MESSAGE))
    yield DONE


async def _ended_by_length(answer: AnswerSoFar, generated: int, prompt_estimate: int) -> AsyncGenerator[bytes, None]:
    answer.leg_completion = generated
    if answer.prompt_tokens is None:  # never reported to the client: the gateway's own estimate
        answer.prompt_tokens = prompt_estimate
    choice = {"index": 0, "delta": {}, "finish_reason": "length"}
    chunk = {"id": answer.id, "object": "chat.completion.chunk", "created": answer.created, "model": answer.model}
    yield b"data: " + json.dumps({**chunk, "choices": [choice]}).encode() + b"\n\n"
    for tail in answer.tail(client_usage=True):
        yield tail

"""Relay a worker's SSE stream to the client through the safety post-filter, and close the request's books at
its end: account for it, save the conversation turn and say whether it was saved, then [DONE]."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field

from anyio import CancelScope

from functions.chat.conversation_turns import AnsweredBy, ConversationTurns, Turn
from functions.chat.streams.capture import StreamCapture
from functions.control import slo_observation
from functions.control.request_accounting import RequestAccount, TokenUsage
from functions.metrics.gateway import GatewayMetrics
from functions.safety.findings import SafetyFinding
from functions.safety.pipeline import SafetyPipeline
from functions.safety.stream_guard import StreamGuard
from shared.storage.ledger import Outcome
from shared.wire.sse import DONE

# The finish reason stored with an answer the client stopped mid-stream (its partial text is kept).
STOPPED = "stopped"
# ... and with one that no replica could finish (functions/chat/streams/continuation.py): the client saw the partial
# text.
FAILED = "error"


def count_turn(metrics: GatewayMetrics, turn: Turn, stored: bool) -> None:
    metrics.conversation_turns.labels(turn.history.value, str(stored).lower()).inc()


def answered_by(account: RequestAccount, safety: SafetyPipeline) -> AnsweredBy:
    """Who answered, stored with the answer: the pool billed (the fallback pool when one answered: the chat router
    sets `account.model` to it) and the safety policies in force."""
    return AnsweredBy(
        account.model, safety.policy_version, safety.post_policy_version, account.model_version, account.usage
    )


def usage_of(capture: StreamCapture, account: RequestAccount) -> TokenUsage | None:
    """The stream's usage: the worker's last report; failing that (a worker without per-chunk usage that stopped
    early), the prompt estimate and one token per content chunk relayed."""
    reported = TokenUsage.from_openai(capture.usage)
    if reported is not None:
        return reported
    return TokenUsage(account.prompt_estimate, capture.content_chunks) if capture.content_chunks else None


@dataclass
class StreamRelay:
    capture: StreamCapture
    account: RequestAccount
    turns: ConversationTurns
    turn: Turn | None
    metrics: GatewayMetrics
    safety: SafetyPipeline
    guard: StreamGuard  # the first choice's post-filter
    # Called with the answer's text once it completed (not halted, stopped or failed) and was stored; must not block.
    on_complete: Callable[[str], None] | None = None
    # n > 1: a post-filter of its own for each further choice (each reads its own text), made when it first speaks.
    new_guard: Callable[[], StreamGuard] | None = None
    other_guards: dict[int, StreamGuard] = field(default_factory=dict)
    finished: bool = False  # the books are closed and the turn saved (or deliberately not)
    halting: bool = False  # the post-filter hit: whatever happens next, this answer ended by content_filter

    async def run(self, events: AsyncGenerator[bytes, None]) -> AsyncIterator[bytes]:
        """Each content chunk is judged (with the text before it) before it is forwarded, so the filter adds no
        chunk of delay; a finding withholds that chunk and halts. A client that goes away mid-stream (Stop) is
        still accounted for (aborted, billed for what was generated) and its partial answer is saved as stopped."""
        capture = self.capture
        try:
            async for event in events:
                if event == DONE:
                    # Judged before the client can see the end: its response may be over (and judged) before this
                    # generator resumes to its `finally` (the relay runs in a task of its own).
                    slo_observation.stream_ended(self.account.model, finished=True, failed=capture.failed)
                    outcome = Outcome.COMPLETED if capture.completed else Outcome.ABORTED
                    store = capture.completed or (capture.failed and bool(capture.text))
                    async for closing in self._finish(outcome, store=store):
                        yield closing
                    return
                mark = capture.mark()
                relayed = capture.relay(event)
                deltas = capture.text_since(mark)
                if deltas and (finding := self._check(deltas)) is not None:
                    capture.restore(mark)
                    # Closing the worker's stream makes it abort the request and free its KV blocks.
                    await events.aclose()
                    async for closing in self._halt(finding):
                        yield closing
                    return
                if capture.failed:  # an error event: a client reading it may leave before [DONE]
                    slo_observation.stream_ended(self.account.model, finished=False, failed=True)
                if relayed is not None:
                    if deltas:
                        slo_observation.content_sent(self.account.model)  # TTFT / inter-token, as the client gets it
                    yield relayed
        finally:
            slo_observation.stream_ended(self.account.model, finished=self.finished, failed=capture.failed)
            if not self.finished:
                await self._client_left()

    def _check(self, deltas: dict[int, str]) -> SafetyFinding | None:
        """Each choice's new text through that choice's post-filter; the first finding halts the whole answer."""
        for index, text in deltas.items():
            guard = self.guard if index == 0 else self._guard_for(index)
            if (finding := guard.check(text)) is not None:
                return finding
        return None

    def _guard_for(self, index: int) -> StreamGuard:
        if index not in self.other_guards:
            if self.new_guard is None:
                raise RuntimeError("a stream with several choices needs a post-filter per choice")
            self.other_guards[index] = self.new_guard()
        return self.other_guards[index]

    async def close_as_stopped(self) -> None:
        """Close the books of an answer that goes no further, as for a Stop (a dead gateway's answer whose client
        does not resume: functions/chat/streams/takeover.py)."""
        self.finished = True
        await self._client_left()

    async def _client_left(self) -> None:
        """The client went away before the end (Stop): bill what was generated and keep the answer it saw, marked
        as stopped, or with its own finish reason if it had in fact ended (a halt, or a finish before [DONE])."""
        capture, account = self.capture, self.account
        if self.halting:
            finish_reason, outcome = "content_filter", Outcome.FILTERED
        elif capture.completed:
            finish_reason, outcome = capture.finish_reason, Outcome.COMPLETED
        else:
            finish_reason, outcome = STOPPED, Outcome.ABORTED
        await account.close(usage_of(capture, account), outcome)
        if self.turn is not None and capture.text and not capture.failed:
            who = answered_by(account, self.safety)
            with CancelScope(shield=True):
                runs = list(capture.server_tool_runs.values())
                stored, _ = await self.turns.finish(self.turn, capture.text, finish_reason, who, tool_runs=runs)
            count_turn(self.metrics, self.turn, stored)

    async def _halt(self, finding: SafetyFinding) -> AsyncIterator[bytes]:
        caller, account = self.account.caller, self.account
        self.halting = True
        await self.safety.halted(finding, caller, account.request_id, account.model)
        for chunk in self.capture.filtered_chunks():
            yield chunk
        async for closing in self._finish(Outcome.FILTERED, store=True):
            yield closing

    async def _finish(self, outcome: Outcome, *, store: bool) -> AsyncIterator[bytes]:
        """Bill what was sent, save the turn (the text the client got), then the conversation chunk and [DONE]."""
        await self.account.close(usage_of(self.capture, self.account), outcome)
        self.finished = True
        closing = None
        if self.turn is not None:
            finish_reason = self.capture.finish_reason or (FAILED if self.capture.failed else None)
            who = answered_by(self.account, self.safety)
            stored, version = (
                await self.turns.finish(
                    self.turn,
                    self.capture.text,
                    finish_reason,
                    who,
                    self.capture.tool_calls,
                    list(self.capture.server_tool_runs.values()),
                )
                if store
                else (False, None)
            )
            count_turn(self.metrics, self.turn, stored)
            closing = self.capture.closing_chunk(self.turn.summary(stored, version))
        if outcome is Outcome.COMPLETED and self.on_complete is not None:
            self.on_complete(self.capture.text)
        if closing is not None:
            yield closing
        yield DONE

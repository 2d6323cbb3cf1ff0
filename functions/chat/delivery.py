"""How an answered chat request reaches its client: a worker's stream relayed through the post-filter as a resumable
SSE stream, a whole completion filtered and returned as JSON, or a result-cache hit; either way settled in the ledger,
stored with the conversation's turn, offered to the result cache and to the shadow judge."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from anyio import to_thread

from functions.accounts.auth import Caller
from functions.chat.conversation_turns import STORED_HEADER, ConversationTurns, Turn
from functions.chat.result_cache.cache import Lookup, ResultCache, storing
from functions.chat.result_cache.replay import (
    billed_usage,
    client_usage,
    completion_body,
    replay_events,
    replay_stream,
)
from functions.chat.server_tools.replay import ReplayedStream
from functions.chat.server_tools.rounds_stream import RoundsStream
from functions.chat.service import ChatService
from functions.chat.streams.capture import StreamCapture, answer_text
from functions.chat.streams.continuation import ContinuingStream
from functions.chat.streams.relay import StreamRelay, answered_by, count_turn
from functions.chat.streams.resumable import ResumableStreams
from functions.chat.streams.takeover import takeover_spec
from functions.chat.structured_output import OutputContract, StructuredOutputs
from functions.chat.tool_arguments import ToolArguments, expects_calls
from functions.control.canary import Canaries, VersionChoice
from functions.control.pool_admission import Slot
from functions.control.request_accounting import RequestAccount, TokenUsage
from functions.judging.shadow import ShadowJudge
from functions.retrieval.service import Retrieved
from functions.safety.pipeline import SafetyPipeline
from shared.storage.ledger import Outcome
from shared.storage.result_cache import CachedAnswer
from shared.storage.timestamps import utc_now
from shared.wire.openai_shape import reasoning_of
from shared.wire.schemas import ChatCompletionRequest

Answer = ContinuingStream | ReplayedStream | RoundsStream | dict[str, Any]
Repair = Callable[[ChatCompletionRequest], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class JsonAnswer:
    """A whole chat completion (or a cached one), with the response headers."""

    body: dict[str, Any]
    headers: dict[str, str]


@dataclass(frozen=True)
class StreamAnswer:
    """A chat answer as server-sent events (already framed), with the response headers."""

    events: AsyncIterator[bytes]
    headers: dict[str, str]


ChatResult = JsonAnswer | StreamAnswer


@dataclass(frozen=True)
class StreamShape:
    """Another API's events made from the chat stream (the Responses API's: functions/responses/events.py).

    The resumable buffer (and the fleet's shared log) keeps the chat stream itself, under `stream_id`, led by `head`
    (an SSE event chat readers skip: what the shaping needs); `shape` turns the buffered stream, from its start, into
    the client's events. So a resume, a Stop and another gateway's takeover work on it exactly as on a chat stream."""

    stream_id: str
    head: bytes
    shape: Callable[[AsyncGenerator[bytes, None]], AsyncGenerator[bytes, None]]


async def _headed(head: bytes, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield head
    async for event in events:
        yield event


@dataclass
class AnsweredRequest:
    """A chat request the gateway has admitted, screened and sent, with the answer it got back."""

    caller: Caller
    body: ChatCompletionRequest
    account: RequestAccount
    turn: Turn | None
    headers: dict[str, str]
    answer: Answer
    version: VersionChoice
    slot: Slot
    cached: Lookup
    retrieved: Retrieved
    contract: OutputContract | None
    tool_contract: ChatCompletionRequest  # what the client's tool_choice asks of the answer
    repair: Repair  # functions/chat/tool_arguments.py's one repair attempt, on the pool that answered
    shadow: ShadowJudge | None
    resumable: bool  # the client asked for a resumable stream (functions/chat/streams/resumable.py)
    shape: StreamShape | None = None  # the stream as another API's events (None: chat's own chunks)


@dataclass(frozen=True)
class Delivery:
    """What delivering an answer uses: the post-filter, the conversation's turns, the answer checks, the result
    cache, the canaries' verdicts and the resumable-stream buffer."""

    chat: ChatService
    turns: ConversationTurns
    safety: SafetyPipeline
    structured: StructuredOutputs
    tool_arguments: ToolArguments
    result_cache: ResultCache
    canaries: Canaries
    resumable: ResumableStreams

    def stream(self, answered: AnsweredRequest) -> StreamAnswer:
        """The worker's stream (or a server-tool answer replayed as one) relayed to the client as server-sent events."""
        service, turns, safety, structured = self.chat, self.turns, self.safety, self.structured
        tool_args, results, canaries = self.tool_arguments, self.result_cache, self.canaries
        body, account, answer, version = answered.body, answered.account, answered.answer, answered.version
        assert not isinstance(answer, dict)
        capture = StreamCapture(
            client_wants_usage=bool(body.stream_options and body.stream_options.include_usage), choices=body.n
        )

        def judge_later(text: str) -> None:
            """A complete answer may be graded by the shadow judge, off this request's path (a non-blocking offer)."""
            if answered.shadow is not None:
                answered.shadow.offer(answered.caller.tenant, account.model, body.messages, text)

        guard = safety.guard(answered.caller)
        relay = StreamRelay(
            capture,
            account,
            turns,
            answered.turn,
            service.metrics,
            safety,
            guard,
            on_complete=judge_later,
            new_guard=lambda: safety.guard(answered.caller),
        )
        # Checked at its finish against the response format (functions/chat/structured_output.py); tool-call deltas held
        # until the calls are valid (functions/chat/tool_arguments.py).
        events = structured.checked(
            answered.retrieved.annotated(answer.events()), body, answered.contract, account.model
        )
        if expects_calls(answered.tool_contract):
            events = tool_args.held(account.model, answered.tool_contract, events, answered.repair)
        # Generated apart from this connection: a client that drops can resume (functions/chat/streams/resumable.py).
        # The pool's place is held until the generation ends, not the connection.
        relayed = relay.run(events)
        if answered.cached.may_store:

            async def remember() -> None:
                await results.remember_stream(
                    answered.cached, relay, answer, pool=account.model, model_version=version.version
                )

            relayed = storing(relayed, remember)
        shape = answered.shape
        if shape is not None:
            relayed = _headed(shape.head, relayed)
        stream = self.resumable.start(
            answered.caller.tenant.id,
            answered.slot.hold(relayed),
            (lambda: shape.stream_id) if shape is not None else (lambda: capture.completion_id),
            answered.headers,
            on_end=lambda: canaries.record(version, ok=not capture.failed),  # a stream's version is judged at its end
            resumable=answered.resumable,
            takeover=self._takeover(answered, capture.client_wants_usage),
        )
        attached = stream.attach()
        return StreamAnswer(shape.shape(attached) if shape is not None else attached, answered.headers)

    @staticmethod
    def _takeover(answered: AnsweredRequest, client_usage: bool) -> dict[str, Any] | None:
        """What another gateway needs to finish this answer if this one dies (functions/chat/streams/takeover.py):
        continued for a client that resumes and a plain text answer (no tools, no output contract, no citations to
        annotate); any other generated answer has its books closed there as for a Stop."""
        answer, body = answered.answer, answered.body
        if not isinstance(answer, ContinuingStream):
            return None
        plain = body.n == 1 and not (body.tools or answered.contract is not None or answered.retrieved.citations)
        continues = answered.resumable and plain
        return takeover_spec(
            answered.account, answered.turn, answer.leg, client_usage=client_usage, continues=continues
        )

    async def json(self, answered: AnsweredRequest) -> JsonAnswer:
        """The whole completion, its tool calls checked and its text judged as the stream filter would, billed for what
        is kept, remembered, stored with the turn and returned as JSON."""
        service, turns, safety = self.chat, self.turns, self.safety
        tool_args, results = self.tool_arguments, self.result_cache
        account, turn, headers = answered.account, answered.turn, answered.headers
        assert isinstance(answered.answer, dict)
        answered.slot.release()
        async with account.closed_if_raising():
            completion = await tool_args.check_completion(
                account.model, answered.tool_contract, answered.answer, answered.repair
            )
        text, finish_reason = answer_text(completion)
        usage, outcome = await filter_answer(safety, account, completion, text)
        if outcome is Outcome.FILTERED:
            text, finish_reason = answer_text(completion)
        await account.close(usage, outcome)
        completed = outcome is Outcome.COMPLETED
        await results.remember_completion(
            answered.cached, completion, completed=completed, pool=account.model, model_version=answered.version.version
        )
        if turn is not None:
            who = answered_by(account, safety)
            calls = completion["choices"][0]["message"].get("tool_calls") if completed else None
            runs = completion.get("server_tool_runs")
            stored, version = (
                await turns.finish(turn, text, finish_reason, who, calls, runs) if finish_reason else (False, None)
            )
            count_turn(service.metrics, turn, stored)
            completion["conversation"] = turn.summary(stored, version)
            headers[STORED_HEADER] = str(stored).lower()
        if completed and answered.shadow is not None:
            answered.shadow.offer(answered.caller.tenant, account.model, answered.body.messages, text)
        return JsonAnswer(answered.retrieved.annotate(completion), headers)

    async def hit(
        self,
        answer: CachedAnswer,
        body: ChatCompletionRequest,
        account: RequestAccount,
        turn: Turn | None,
        headers: dict[str, str],
        *,
        resumable: bool,
        shape: StreamShape | None = None,
    ) -> ChatResult:
        """A result-cache hit: close the books (completed, billed as cached), save the turn, then answer streamed or
        not. A stream goes through the resumable-stream buffer like any other (event ids, `Last-Event-ID`)."""
        account.served_from_cache = True  # no GPU spent: kept out of the spend metric
        await account.close(billed_usage(answer), Outcome.COMPLETED)
        return await self._replayed(answer, body, account, turn, headers, resumable=resumable, shape=shape)

    async def fixed(
        self,
        text: str,
        version: str,
        body: ChatCompletionRequest,
        account: RequestAccount,
        turn: Turn | None,
        headers: dict[str, str],
        *,
        resumable: bool,
        shape: StreamShape | None = None,
    ) -> ChatResult:
        """An answer the service gives itself, not a model (the safety stage's supportive reply): billed nothing
        (closed as filtered: the safety stage answered), saved with the turn under `version`, delivered as a replayed
        answer is."""
        now = utc_now()
        answer = CachedAnswer(
            tenant_id=account.caller.tenant.id, key="0" * 64, pool=account.model, model_version=version, content=text,
            finish_reason="stop", prompt_tokens=0, completion_tokens=0, created_at=now, expires_at=now,
        )  # fmt: skip
        account.served_from_cache = True  # no GPU spent
        await account.close(TokenUsage(0, 0), Outcome.FILTERED)
        return await self._replayed(answer, body, account, turn, headers, resumable=resumable, shape=shape)

    async def _replayed(
        self,
        answer: CachedAnswer,
        body: ChatCompletionRequest,
        account: RequestAccount,
        turn: Turn | None,
        headers: dict[str, str],
        *,
        resumable: bool,
        shape: StreamShape | None,
    ) -> ChatResult:
        """Save the turn, then the answer as a body or replayed as a stream (the books are closed already)."""
        turns, safety = self.turns, self.safety
        account.model_version = answer.model_version
        account.usage = TokenUsage.from_openai(client_usage(answer))  # a stored response repeats what the client saw
        conversation = None
        if turn is not None:
            stored, version = await turns.finish(
                turn, answer.content, answer.finish_reason, answered_by(account, safety)
            )
            count_turn(self.chat.metrics, turn, stored)
            conversation = turn.summary(stored, version)
            headers[STORED_HEADER] = str(stored).lower()
        completion_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if not body.stream:
            completion = completion_body(answer, completion_id, created)
            if conversation is not None:
                completion["conversation"] = conversation
            return JsonAnswer(completion, headers)
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        events = replay_events(answer, completion_id, created, include_usage=include_usage, conversation=conversation)
        replayed = replay_stream(events)
        stream = self.resumable.start(
            account.caller.tenant.id,
            _headed(shape.head, replayed) if shape is not None else replayed,
            (lambda: shape.stream_id) if shape is not None else (lambda: completion_id),
            headers,
            resumable=resumable,
        )
        attached = stream.attach()
        return StreamAnswer(shape.shape(attached) if shape is not None else attached, headers)


async def filter_answer(
    safety: SafetyPipeline, account: RequestAccount, completion: dict[str, Any], text: str
) -> tuple[TokenUsage | None, Outcome]:
    """Judge a whole answer as the stream filter would, each choice apart (`text`: the first's); on a finding, cut
    that choice where a stream would have halted, set its finish_reason "content_filter", and bill the completion
    tokens of what is kept (pro rata by characters, over every choice)."""
    usage = TokenUsage.from_openai(completion.get("usage"))
    choices = completion.get("choices") or []
    texts = [text, *(str((c.get("message") or {}).get("content") or "") for c in choices[1:])]
    total, kept_total, findings = sum(map(len, texts)), 0, []
    for choice, choice_text in zip(choices, texts, strict=False):
        message = choice.get("message") or {}
        if (reasoning := reasoning_of(message)) is not None:  # a reasoning model's: read first, as a stream sends it
            kept, finding = await to_thread.run_sync(safety.guard(account.caller).scan, reasoning)
            if finding is not None:  # a stream would have halted inside the reasoning, before any answer text
                findings.append(finding)
                message.pop("reasoning_content", None)
                message["reasoning"] = reasoning[:kept]
                message["content"] = ""
                choice["finish_reason"] = "content_filter"
                _keep_logprobs_of(choice, 0)
                continue
        guard = safety.guard(account.caller)
        kept, finding = await to_thread.run_sync(guard.scan, choice_text)
        kept_total += len(choice_text) if finding is None else kept
        if finding is not None:
            findings.append(finding)
            choice["message"]["content"] = choice_text[:kept]
            choice["finish_reason"] = "content_filter"
            _keep_logprobs_of(choice, kept)
    if not findings:
        return usage, Outcome.COMPLETED
    for finding in findings:
        await safety.halted(finding, account.caller, account.request_id, account.model)
    if usage is not None and total:
        billed = round(usage.completion_tokens * kept_total / total)
        usage = TokenUsage(usage.prompt_tokens, billed, usage.cached_tokens)
        completion["usage"] = {
            **completion["usage"],
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        }
    return usage, Outcome.FILTERED


def _keep_logprobs_of(choice: dict[str, Any], kept_chars: int) -> None:
    """A cut choice's log-probabilities: only the tokens of the text kept (the cut text's tokens never reach the
    client, not even as log-probability entries)."""
    logprobs = choice.get("logprobs")
    entries = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(entries, list):
        return
    kept, length = [], 0
    for entry in entries:
        length += len(str(entry.get("token") or ""))
        if length > kept_chars:
            break
        kept.append(entry)
    logprobs["content"] = kept

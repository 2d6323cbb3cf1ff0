"""`POST /v1/chat/completions`: attach the conversation, admit, screen it, route, answer as JSON or an SSE stream
through the safety post-filter, and account."""

from __future__ import annotations

from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from functions.admission import BROWNOUT_HEADER
from functions.auth import CurrentCaller
from functions.chat_service import ChatService
from functions.conversation_turns import STORED_HEADER, ConversationTurns
from functions.judging.client import JUDGE_CALL_HEADER
from functions.judging.shadow import ShadowJudge
from functions.request_accounting import Accounting, RequestAccount, TokenUsage
from functions.safety.pipeline import SafetyPipeline
from functions.slo_observation import label_chat
from functions.stream_capture import StreamCapture, answer_text
from functions.stream_relay import StreamRelay, answered_by, count_turn
from functions.worker_client import NoReplicaReachableError, UpstreamStream
from shared.errors import ContentPolicyViolationError
from shared.schemas import ChatCompletionRequest
from shared.storage.ledger import Outcome

router = APIRouter(prefix="/v1", tags=["chat"])

# Set when the requested model's pool had no reachable replica and another pool of the tier answered.
FALLBACK_HEADER = "x-fleetchat-fallback-model"


@router.post("/chat/completions", response_model=None)
async def chat_completions(
    body: ChatCompletionRequest,
    caller: CurrentCaller,
    request: Request,
    x_session_id: Annotated[str | None, Header(max_length=256)] = None,
    x_conversation_id: Annotated[str | None, Header(max_length=64)] = None,
) -> Response:
    service: ChatService = request.app.state.chat
    turns: ConversationTurns = request.app.state.turns
    accounting: Accounting = request.app.state.accounting
    safety: SafetyPipeline = request.app.state.safety
    # A judge's own call (this gateway serving as someone's judge) is never handed to the shadow judge.
    shadow: ShadowJudge | None = None if JUDGE_CALL_HEADER in request.headers else request.app.state.shadow_judge
    turn = await turns.begin(caller.tenant, body, x_conversation_id)
    if turn is not None:
        body = turn.apply(body)
    pool = service.pool_for(caller.tenant, body)
    label_chat(caller.tenant, pool)  # this request's tier and pool in the SLO metrics
    asked_max_tokens = body.output_limit()
    account = await accounting.open(caller, body, pool)
    body = account.apply(body)
    # A block is filtered; a remote guard that could not judge (fail policy "closed": 503) failed; a client gone while
    # a remote guard judged aborted: every way out settles the reservation.
    async with account.closed_if_raising():
        try:
            # The whole conversation (stored history included) is judged before any worker sees it.
            await safety.screen(caller, body, account.request_id, pool)
        except ContentPolicyViolationError:
            await account.close(TokenUsage(0, 0), Outcome.FILTERED)
            raise
    # A conversation sticks to one replica (its KV blocks live there) unless the client names a session itself.
    session = x_session_id or (turn.conversation_id if turn else None)
    headers = {**(turn.headers() if turn else {}), **account.headers}
    if account.reservation.brownout:
        headers[BROWNOUT_HEADER] = "true"
    async with account.closed_if_raising():
        try:
            answer = await _answer(service, pool, body, session)
        except NoReplicaReachableError:
            contexts = accounting.admission.context_tokens
            fallback = service.fallback(caller.tenant, pool, body, asked_max_tokens, contexts)
            if fallback is None:
                raise
            fallback_pool, fallback_body = fallback
            answer = await _answer(service, fallback_pool, fallback_body, session)
            account.model = fallback_pool  # billed as the model that answered
            headers[FALLBACK_HEADER] = fallback_pool
    if isinstance(answer, UpstreamStream):
        capture = StreamCapture(client_wants_usage=bool(body.stream_options and body.stream_options.include_usage))
        # A complete answer may be graded by the shadow judge, off this request's path (a non-blocking offer).
        messages = body.messages

        def judge_later(text: str) -> None:
            if shadow is not None:
                shadow.offer(caller.tenant, account.model, messages, text)

        guard = safety.guard(caller)
        relay = StreamRelay(capture, account, turns, turn, service.metrics, safety, guard, on_complete=judge_later)
        return StreamingResponse(
            relay.run(answer.events()),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", **headers},
        )
    completion = answer
    text, finish_reason = answer_text(completion)
    usage, outcome = await _filter_answer(safety, account, completion, text)
    if outcome is Outcome.FILTERED:
        text, finish_reason = answer_text(completion)
    await account.close(usage, outcome)
    if turn is not None:
        who = answered_by(account, safety)
        stored, version = await turns.finish(turn, text, finish_reason, who) if finish_reason else (False, None)
        count_turn(service.metrics, turn, stored)
        completion["conversation"] = turn.summary(stored, version)
        headers[STORED_HEADER] = str(stored).lower()
    if outcome is Outcome.COMPLETED and shadow is not None:
        shadow.offer(caller.tenant, account.model, body.messages, text)
    return JSONResponse(completion, headers=headers)


async def _answer(
    service: ChatService, pool: str, body: ChatCompletionRequest, session: str | None
) -> UpstreamStream | dict[str, Any]:
    """The worker's answer from `pool`: an open stream, or the whole completion body."""
    routed = service.route(pool, body, session)
    return await (service.open_stream(routed) if body.stream else service.complete(routed))


async def _filter_answer(
    safety: SafetyPipeline, account: RequestAccount, completion: dict[str, Any], text: str
) -> tuple[TokenUsage | None, Outcome]:
    """Judge a whole answer as the stream filter would; on a finding, cut it where a stream would have halted,
    set finish_reason "content_filter", and bill the completion tokens of the part kept (pro rata by characters)."""
    usage = TokenUsage.from_openai(completion.get("usage"))
    guard = safety.guard(account.caller)
    kept, finding = await to_thread.run_sync(guard.scan, text)
    if finding is None:
        return usage, Outcome.COMPLETED
    await safety.halted(finding, account.caller, account.request_id, account.model)
    choice = completion["choices"][0]
    choice["message"]["content"] = text[:kept]
    choice["finish_reason"] = "content_filter"
    if usage is not None and text:
        usage = TokenUsage(usage.prompt_tokens, round(usage.completion_tokens * kept / len(text)), usage.cached_tokens)
        completion["usage"] = {
            **completion["usage"],
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        }
    return usage, Outcome.FILTERED

"""`POST /v1/chat/completions`: attach the conversation, admit, screen it, route, answer as JSON or an SSE stream
through the safety post-filter, and account."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from functions.admission import BROWNOUT_HEADER
from functions.auth import CurrentCaller
from functions.canary import MODEL_VERSION_HEADER, Canaries, VersionChoice
from functions.chat_service import ChatService, RoutedRequest
from functions.conversation_turns import STORED_HEADER, ConversationTurns
from functions.judging.client import JUDGE_CALL_HEADER
from functions.judging.shadow import ShadowJudge
from functions.pool_overflow import PoolControl
from functions.request_accounting import Accounting, RequestAccount, TokenUsage
from functions.resumable_streams import RESUMABLE_HEADER
from functions.safety.pipeline import SafetyPipeline
from functions.slo_observation import label_chat
from functions.stream_capture import StreamCapture, answer_text
from functions.stream_continuation import ContinuingStream
from functions.stream_relay import StreamRelay, answered_by, count_turn
from functions.structured_output import StructuredOutputs, contract_for
from functions.worker_client import NoReplicaReachableError
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
    structured: StructuredOutputs = request.app.state.structured_outputs
    contract = contract_for(body)  # a bad response_format is a 400 before anything is stored or reserved
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
    canaries: Canaries = request.app.state.canaries
    contexts = accounting.admission.context_tokens
    tenant = caller.tenant
    control: PoolControl = request.app.state.pool_control

    def fallback_route() -> RoutedRequest | None:
        """Where an answer from `pool` continues if none of its replicas can (functions/stream_continuation.py)."""
        found = service.fallback(caller.tenant, pool, body, asked_max_tokens, contexts)
        return service.route(found[0], found[1], session) if found is not None else None

    async with account.closed_if_raising():
        # A place in the pool, by priority (waiting if it is busy), or overflow to the tier's next pool (announced).
        placed = await control.place(
            tenant.id,
            tenant.tier,
            pool,
            body,
            lambda: service.fallback(tenant, pool, body, asked_max_tokens, contexts),
            request.receive,
        )
    if placed.overflowed_from is not None:
        pool, body = placed.pool, placed.body
        account.model = pool  # billed as the model that answered
        headers[FALLBACK_HEADER] = pool
    slot = placed.slot
    async with account.closed_if_raising(), slot.released_if_raising():
        try:
            answer, version = await _answer(service, canaries, pool, body, session, fallback_route)
        except NoReplicaReachableError:
            fallback = service.fallback(caller.tenant, pool, body, asked_max_tokens, contexts)
            if fallback is None:
                raise
            fallback_pool, fallback_body = fallback
            answer, version = await _answer(service, canaries, fallback_pool, fallback_body, session)
            control.count_downgrade(tenant.tier, pool, fallback_pool, "unreachable")
            account.model = fallback_pool  # billed as the model that answered
            headers[FALLBACK_HEADER] = fallback_pool
        if contract is not None and isinstance(answer, dict):  # valid (or asked once more) before it is billed
            answer = await structured.settled(
                answer, contract, lambda: _answer(service, canaries, pool, body, session), account.model, body
            )
    account.model_version = headers[MODEL_VERSION_HEADER] = version.version  # stored with the answer
    if isinstance(answer, ContinuingStream):
        capture = StreamCapture(client_wants_usage=bool(body.stream_options and body.stream_options.include_usage))
        # A complete answer may be graded by the shadow judge, off this request's path (a non-blocking offer).
        messages = body.messages

        def judge_later(text: str) -> None:
            if shadow is not None:
                shadow.offer(caller.tenant, account.model, messages, text)

        guard = safety.guard(caller)
        relay = StreamRelay(capture, account, turns, turn, service.metrics, safety, guard, on_complete=judge_later)
        # Generated apart from this connection: a client that drops can resume (functions/resumable_streams.py). The
        # pool's place is held until the generation ends, not the connection.
        stream = request.app.state.resumable.start(
            caller.tenant.id,
            slot.hold(relay.run(structured.checked(answer.events(), body, contract, account.model))),
            lambda: capture.completion_id,
            headers,
            on_end=lambda: canaries.record(version, ok=not capture.failed),  # a stream's version is judged at its end
            resumable=request.headers.get(RESUMABLE_HEADER, "").lower() == "true",
        )
        return StreamingResponse(
            stream.attach(),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", **headers},
        )
    slot.release()
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
    service: ChatService,
    canaries: Canaries,
    pool: str,
    body: ChatCompletionRequest,
    session: str | None,
    fallback: Callable[[], RoutedRequest | None] | None = None,
) -> tuple[ContinuingStream | dict[str, Any], VersionChoice]:
    """The worker's answer from `pool` (an open stream, continued on `fallback()` if the pool cannot finish it, or the
    whole completion body) and the model version (the pool's canary or its stable version) that gives it."""
    version = canaries.choose(pool, session)
    for attempt in (version, canaries.stable(pool)):  # an unreachable canary leaves the answer to the stable version
        routed = service.route(attempt.ring, body, session)
        call = service.open_stream(routed, fallback) if body.stream else service.complete(routed)
        try:
            return await canaries.observe(attempt, call, streamed=bool(body.stream)), attempt
        except NoReplicaReachableError:
            if not attempt.canary:
                raise
    raise AssertionError("unreachable")


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

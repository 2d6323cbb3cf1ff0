"""`POST /v1/chat/completions`: attach the conversation, admit, screen it, route, answer as JSON or an SSE stream
through the safety post-filter, and account."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import Response

from functions.accounts.auth import CurrentCaller
from functions.api.openapi_description import error_responses
from functions.chat.conversation_turns import ConversationTurns
from functions.chat.delivery import AnsweredRequest, json_response, stream_response
from functions.chat.result_cache.cache import CACHE_HEADER, ResultCache
from functions.chat.result_cache.replay import serve_hit
from functions.chat.server_tools.loop import ToolLoop
from functions.chat.server_tools.replay import ReplayedStream
from functions.chat.service import ChatService, RoutedRequest
from functions.chat.streams.continuation import ContinuingStream
from functions.chat.structured_output import StructuredOutputs, contract_for
from functions.chat.tool_arguments import check_request, client_contract
from functions.control.admission import BROWNOUT_HEADER
from functions.control.canary import MODEL_VERSION_HEADER, Canaries, VersionChoice
from functions.control.pool_overflow import PoolControl
from functions.control.request_accounting import Accounting, TokenUsage
from functions.control.slo_observation import label_chat
from functions.judging.client import JUDGE_CALL_HEADER
from functions.judging.shadow import ShadowJudge
from functions.retrieval.service import Retrieval
from functions.safety.pipeline import SafetyPipeline
from functions.worker_client import NoReplicaReachableError
from shared.errors import ContentPolicyViolationError
from shared.storage.ledger import Outcome
from shared.wire.request_parameters import refuse_unknown_or_unhonoured
from shared.wire.schemas import ChatCompletionRequest

router = APIRouter(prefix="/v1", tags=["chat"])

_STREAM_OR_JSON: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The chat completion, or with `stream: true` its server-sent events (`data: {chunk}` lines "
        "ending with `data: [DONE]`).",
        "content": {"application/json": {}, "text/event-stream": {}},
    }
}

# Set when the requested model's pool had no reachable replica and another pool of the tier answered.
FALLBACK_HEADER = "x-fleetchat-fallback-model"


@router.post(
    "/chat/completions",
    response_model=None,
    responses={**_STREAM_OR_JSON, **error_responses(404, 429, 502, 503)},
)
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
    refuse_unknown_or_unhonoured(body)  # before anything is reserved, stored or sent
    server_tools = request.app.state.server_tools.requested(body)  # a 400 before anything is charged
    structured: StructuredOutputs = request.app.state.structured_outputs
    contract = contract_for(body)  # a bad response_format is a 400 before anything is stored or reserved
    retrieval: Retrieval = request.app.state.retrieval
    asked = await retrieval.plan(caller, body)  # another tenant's vector store is a 404 before anything is charged
    turn = await turns.begin(caller.tenant, body, x_conversation_id)
    if turn is not None:
        body = turn.apply(body)
    check_request(body, server_tools or ())  # a malformed tool request is a 400 before anything is charged
    pool = service.pool_for(caller.tenant, body)
    label_chat(caller.tenant, pool)  # this request's tier and pool in the SLO metrics
    asked_max_tokens = body.output_limit()
    account = await accounting.open(caller, body, pool)
    body = account.apply(body)
    tools = request.app.state.server_tools.loop(server_tools, account) if server_tools else None
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
    # OpenAI's `prompt_cache_key` is the same hint: requests sharing it share a prefix, so they share a replica.
    session = x_session_id or (turn.conversation_id if turn else None) or _prompt_cache_key(body)
    headers = {**(turn.headers() if turn else {}), **account.headers}
    if account.reservation.brownout:
        headers[BROWNOUT_HEADER] = "true"
    # Passages from the named stores, after the ask itself was screened (functions/retrieval/context.py: as context).
    async with account.closed_if_raising():
        retrieved = await retrieval.retrieve(asked, caller, body, pool)
    body, headers = retrieved.apply(body), {**headers, **retrieved.headers}
    if turn is not None:
        turn.citations = retrieved.stored
    canaries: Canaries = request.app.state.canaries
    contexts = accounting.admission.context_tokens
    tenant = caller.tenant
    control: PoolControl = request.app.state.pool_control
    # A deterministic request may be answered from the result cache, keyed on the version that would answer it
    # (after auth, limits and safety: a hit still counts against limits and was screened; docs/result-cache.md).
    results: ResultCache = request.app.state.result_cache
    chosen = canaries.choose(pool, session)
    post_policy = safety.post_policy_version
    cache_control = request.headers.get("cache-control")
    async with account.closed_if_raising():
        cached = await results.lookup(tenant, pool, chosen.version, post_policy, body, cache_control)
        headers[CACHE_HEADER] = cached.outcome.value
        if cached.hit is not None:
            headers[MODEL_VERSION_HEADER] = cached.hit.model_version
            return await serve_hit(cached.hit, body, account, turn, request, headers)

    def fallback_route() -> RoutedRequest | None:
        """Where an answer from `pool` continues if none of its replicas can
        (functions/chat/streams/continuation.py)."""
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
            same_pool = placed.overflowed_from is None
            answer, version = await _answer(
                service, canaries, pool, body, session, fallback_route, tools, chosen if same_pool else None
            )
        except NoReplicaReachableError:
            fallback = service.fallback(caller.tenant, pool, body, asked_max_tokens, contexts)
            if fallback is None:
                raise
            fallback_pool, fallback_body = fallback
            answer, version = await _answer(service, canaries, fallback_pool, fallback_body, session, None, tools)
            control.count_downgrade(tenant.tier, pool, fallback_pool, "unreachable")
            account.model = fallback_pool  # billed as the model that answered
            headers[FALLBACK_HEADER] = fallback_pool
        if contract is not None and isinstance(answer, dict):  # valid (or asked once more) before it is billed
            answer = await structured.settled(
                answer, contract, lambda: _answer(service, canaries, pool, body, session), account.model, body
            )
    account.model_version = headers[MODEL_VERSION_HEADER] = version.version  # stored with the answer

    async def repair(retry: ChatCompletionRequest) -> dict[str, Any]:
        """functions/chat/tool_arguments.py's one repair attempt, on the pool that answered."""
        retry = retry.model_copy(update={"model": account.model})
        return await service.complete(service.route(account.model, retry, session))

    answered = AnsweredRequest(
        request=request,
        caller=caller,
        body=body,
        account=account,
        turn=turn,
        headers=headers,
        answer=answer,
        version=version,
        slot=slot,
        cached=cached,
        retrieved=retrieved,
        contract=contract,
        tool_contract=client_contract(body, server_tools or ()),
        repair=repair,
        shadow=shadow,
    )
    if isinstance(answer, dict):
        return await json_response(answered)
    return stream_response(answered)  # a worker's stream, or a server-tool answer replayed as one


def _prompt_cache_key(body: ChatCompletionRequest) -> str | None:
    key = (body.model_extra or {}).get("prompt_cache_key")
    return key if isinstance(key, str) and key else None


async def _answer(
    service: ChatService,
    canaries: Canaries,
    pool: str,
    body: ChatCompletionRequest,
    session: str | None,
    fallback: Callable[[], RoutedRequest | None] | None = None,
    tools: ToolLoop | None = None,
    chosen: VersionChoice | None = None,
) -> tuple[ContinuingStream | ReplayedStream | dict[str, Any], VersionChoice]:
    """The worker's answer from `pool` (an open stream, continued on `fallback()` if the pool cannot finish it, or the
    whole completion body) and the model version (the pool's canary or its stable version) that gives it; `chosen`:
    the version already chosen for this request (the result cache looked it up under that version)."""
    version = chosen or canaries.choose(pool, session)
    for attempt in (version, canaries.stable(pool)):  # an unreachable canary leaves the answer to the stable version
        routed = service.route(attempt.ring, body, session)
        call: Awaitable[ContinuingStream | ReplayedStream | dict[str, Any]]
        if tools is not None:  # rounds with the gateway's own tools (functions/chat/server_tools/loop.py)
            call = tools.answer(service.complete, routed, streamed=bool(body.stream))
        else:
            call = service.open_stream(routed, fallback) if body.stream else service.complete(routed)
        try:
            return await canaries.observe(attempt, call, streamed=bool(body.stream)), attempt
        except NoReplicaReachableError:
            if not attempt.canary:
                raise
    raise AssertionError("unreachable")

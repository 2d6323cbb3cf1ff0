"""The chat-completions pipeline: one object owns a chat request's ordered steps (checked, conversation, admitted,
screened, retrieved, cached, placed, answered) and hands the answer to delivery (the post-filter, persist and settle)
as a JSON body or an SSE stream. The request moves forward as one value, `ChatCall`; each step adds what it settles."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from anyio import to_thread
from starlette.types import Receive

from functions.accounts.auth import Caller
from functions.chat.choices import refuse_unserved_with_choices
from functions.chat.conversation_turns import ConversationTurns, Turn
from functions.chat.delivery import Answer, AnsweredRequest, ChatResult, Delivery, StreamShape
from functions.chat.images import ImageFetcher, has_images, inline_images
from functions.chat.result_cache.cache import CACHE_HEADER, Lookup, ResultCache
from functions.chat.server_tools.loop import ToolLoop
from functions.chat.server_tools.service import ServerTools
from functions.chat.service import ChatService, RoutedRequest
from functions.chat.structured_output import OutputContract, StructuredOutputs, contract_for
from functions.chat.tool_arguments import check_request, client_contract
from functions.control.admission import BROWNOUT_HEADER
from functions.control.batch_lines import queue_tier
from functions.control.canary import MODEL_VERSION_HEADER, Canaries, VersionChoice
from functions.control.pool_admission import Slot
from functions.control.pool_overflow import PoolControl
from functions.control.request_accounting import Accounting, RequestAccount, TokenUsage
from functions.control.slo_observation import label_chat
from functions.judging.shadow import ShadowJudge
from functions.retrieval.service import Plan, Retrieval, Retrieved
from functions.safety.care import CARE_HEADER, CARE_VERSION, CareDecision, care_reply
from functions.safety.findings import SafetyFinding
from functions.safety.injection_screen import InjectionScreen
from functions.safety.pipeline import SafetyPipeline
from functions.safety.rules import RULES_VERSION
from functions.safety.untrusted_context import QUOTED_HEADER, Rewritten, screen_untrusted
from functions.worker_client import NoReplicaReachableError
from shared.errors import ContentPolicyViolationError, FleetchatError, InvalidRequestError, ModelNotFoundError
from shared.storage.conversations import Conversation
from shared.storage.ledger import Outcome
from shared.storage.safety_audit import SafetyAction, SafetyDetector, SafetyLayer
from shared.wire.request_parameters import refuse_unknown_or_unhonoured
from shared.wire.responses_api import ResponseRecord
from shared.wire.schemas import ChatCompletionRequest

# Set when the requested model's pool had no reachable replica and another pool of the tier answered.
FALLBACK_HEADER = "x-fleetchat-fallback-model"


@dataclass
class ChatCall:
    """One chat request on its way through the pipeline: what the client sent, then what each step settled.

    `body` is the request as the next step sees it: the stored conversation's history, the admitted output budget and
    the retrieved passages are applied to it in that order (each by the step that owns it)."""

    caller: Caller
    body: ChatCompletionRequest
    receive: Receive  # the client's connection, watched while the request waits for a place in its pool
    session_header: str | None = None  # x-session-id: the client's own sticky-replica hint
    conversation_id: str | None = None  # x-conversation-id
    cache_control: str | None = None
    resumable: bool = False  # the client asked for a resumable stream (functions/chat/streams/resumable.py)
    judge_call: bool = False  # a judge's own call: never handed to the shadow judge
    # Another API over this pipeline (the Responses API: functions/responses/service.py): the id a new conversation
    # gets, the record its stored answer keeps, and the stream's shape.
    new_conversation_id: str | None = None
    response: ResponseRecord | None = None
    shape: StreamShape | None = None
    loaded_conversation: Conversation | None = None  # the conversation continued exactly as the caller read it
    fork_to: str | None = None  # ... and where its turn goes if it moved on meanwhile (conversation_turns.Turn)
    reasoning_param: str = "reasoning_effort"  # how the client named the reasoning effort (`reasoning.effort`)
    accept_language: str | None = None  # the reader's languages: the supportive reply's crisis line (safety/care.py)
    # checked
    server_tools: list[str] | None = field(init=False)
    contract: OutputContract | None = field(init=False)
    plan: Plan | None = field(init=False)
    # conversation
    turn: Turn | None = field(init=False)
    # tool results and arguments a screen flagged: quoted inertly or withheld (functions/safety/untrusted_context.py)
    quoted: Rewritten | None = field(init=False)
    # admitted
    pool: str = field(init=False)
    asked_max_tokens: int | None = field(init=False)
    account: RequestAccount = field(init=False)
    tools: ToolLoop | None = field(init=False)
    session: str | None = field(init=False)
    headers: dict[str, str] = field(init=False)
    # screened: a self-harm ask answered with the supportive reply instead of a model (functions/safety/care.py)
    care: CareDecision | None = field(init=False)
    # retrieved
    retrieved: Retrieved = field(init=False)
    # cached
    chosen: VersionChoice = field(init=False)
    cached: Lookup = field(init=False)
    # placed
    slot: Slot = field(init=False)
    overflowed: bool = field(init=False)


@dataclass(frozen=True)
class ChatServices:
    """What the pipeline's steps use, built once when the gateway starts (functions/app.py)."""

    chat: ChatService
    turns: ConversationTurns
    accounting: Accounting
    safety: SafetyPipeline
    server_tools: ServerTools
    structured: StructuredOutputs
    retrieval: Retrieval
    canaries: Canaries
    pool_control: PoolControl
    result_cache: ResultCache
    delivery: Delivery
    shadow_judge: ShadowJudge | None
    injection: InjectionScreen | None = (
        None  # screens tool results and arguments (functions/safety/untrusted_context.py)
    )
    images: ImageFetcher | None = None  # checks image parts and fetches image URLs (functions/chat/images.py)


class ChatPipeline:
    """`run(call)`: a chat request from its checks to its answer, each step in the order the design gives."""

    def __init__(self, services: ChatServices) -> None:
        self.services = services

    async def run(self, call: ChatCall) -> ChatResult:
        await self.checked(call)
        await self.conversation(call)
        await self.admitted(call)
        await self.screened(call)
        if call.care is not None:
            return await self.cared(call)
        await self.retrieved(call)
        hit = await self.cached(call)
        if hit is not None:
            return hit
        await self.placed(call)
        answer, version = await self.answered(call)
        return await self.delivered(call, answer, version)

    async def checked(self, call: ChatCall) -> None:
        """What no model could honour is a 400 (or another tenant's vector store a 404) before anything is reserved,
        stored or sent: unknown parameters, server tools, the response format, the named vector stores."""
        s = self.services
        refuse_unknown_or_unhonoured(call.body)
        call.server_tools = s.server_tools.requested(call.body, call.caller.tenant.tier)
        refuse_unserved_with_choices(call.body, call.server_tools, call.conversation_id)
        call.contract = contract_for(call.body)
        call.plan = await s.retrieval.plan(call.caller, call.body)
        if has_images(call.body):
            await self.images(call)

    async def images(self, call: ChatCall) -> None:
        """Images only for a model that sees them (a 400 before any is fetched); then every image part checked and
        made a data URI (a URL fetched by the gateway), so the stored turn, the worker and later turns share bytes."""
        s = self.services
        with contextlib.suppress(ModelNotFoundError):  # admission refuses the model with its own 404
            s.chat.check_images(call.caller.tenant, s.chat.pool_for(call.caller.tenant, call.body), call.body)
        if s.images is None:
            raise InvalidRequestError("This gateway takes no images.", param="messages", code="image_input_unsupported")
        call.body = await inline_images(call.body, s.images.limits, s.images)

    async def conversation(self, call: ChatCall) -> None:
        """The stored conversation's history joins the request (functions/chat/conversation_turns.py); the whole
        history's tool calls are checked like the client's own (a 400 before anything is charged)."""
        try:  # the requested model's pool: its context bounds the rendered history
            pool: str | None = self.services.chat.pool_for(call.caller.tenant, call.body)
        except FleetchatError:  # a model the tier cannot use: admission refuses it, after the conversation's checks
            pool = None
        call.turn = await self.services.turns.begin(
            call.caller.tenant,
            call.body,
            call.conversation_id,
            new_id=call.new_conversation_id,
            loaded=call.loaded_conversation,
            fork_to=call.fork_to,
            pool=pool,
        )
        if call.turn is not None:
            call.turn.response = call.response
            call.body = call.turn.apply(call.body)
        check_request(call.body, call.server_tools or ())
        call.quoted = None
        screen = self.services.injection
        if any(m.role == "tool" or m.tool_calls for m in call.body.messages):
            # Before admission, so the quotes' own tokens are counted; the stored turn keeps what the client sent.
            rewritten = await to_thread.run_sync(screen_untrusted, list(call.body.messages), screen)
            if rewritten.verdicts:
                call.quoted = rewritten
                call.body = call.body.model_copy(update={"messages": rewritten.messages})

    async def admitted(self, call: ChatCall) -> None:
        """The tier's pool for the model, then the rate limits and a token reservation (429 otherwise); the output
        budget the reservation allows joins the request. From here every way out settles the reservation."""
        s = self.services
        call.pool = s.chat.pool_for(call.caller.tenant, call.body)
        s.chat.check_reasoning(call.pool, call.body, param=call.reasoning_param)
        s.chat.check_images(call.caller.tenant, call.pool, call.body)  # the stored history's images too
        label_chat(call.caller.tenant, call.pool)  # this request's tier and pool in the SLO metrics
        call.asked_max_tokens = call.body.output_limit()
        call.account = await s.accounting.open(call.caller, call.body, call.pool)
        call.body = call.account.apply(call.body)
        call.tools = s.server_tools.loop(call.server_tools, call.account, s.safety) if call.server_tools else None
        # A conversation sticks to one replica (its KV blocks live there) unless the client names a session itself;
        # OpenAI's `prompt_cache_key` is the same hint: requests sharing it share a prefix, so they share a replica.
        call.session = (
            call.session_header or (call.turn.conversation_id if call.turn else None) or _prompt_cache_key(call.body)
        )
        call.headers = {**(call.turn.headers() if call.turn else {}), **call.account.headers}
        if call.account.reservation.brownout:
            call.headers[BROWNOUT_HEADER] = "true"

    async def screened(self, call: ChatCall) -> None:
        """The whole conversation (stored history included) is judged before any worker sees it. A block is filtered;
        a remote guard that could not judge (fail policy "closed": 503) failed; a client gone while a remote guard
        judged aborted: every way out settles the reservation."""
        account = call.account
        async with account.closed_if_raising():
            try:
                call.care = await self.services.safety.screen(
                    call.caller, call.body, account.request_id, call.pool, care=True
                )
            except ContentPolicyViolationError:
                await account.close(TokenUsage(0, 0), Outcome.FILTERED)
                raise
        if call.quoted is not None:
            call.headers[QUOTED_HEADER] = str(len(call.quoted.verdicts))
            screen = self.services.injection
            for action, audited in (("quoted", SafetyAction.QUOTED), ("withheld", SafetyAction.WITHHELD)):
                worst = call.quoted.worst(action)  # type: ignore[arg-type]
                if worst is None:
                    continue
                verdict, excerpt = worst
                by_screen = verdict.detector is SafetyDetector.INJECTION_SCREEN and screen is not None
                version = f"injection-{screen.meta.version}" if by_screen and screen is not None else RULES_VERSION
                finding = SafetyFinding(
                    layer=SafetyLayer.CONTEXT, detector=verdict.detector, category=verdict.category,
                    score=min(1.0, verdict.score), excerpt=excerpt, policy_version=version,
                )  # fmt: skip
                await self.services.safety.record(finding, audited, call.caller, account.request_id, call.pool)

    async def cared(self, call: ChatCall) -> ChatResult:
        """A self-harm ask answered by the fixed supportive reply, not a model (functions/safety/care.py): streamed or
        not as asked, saved with the turn, billed nothing."""
        call.headers[CARE_HEADER] = "care"
        async with call.account.closed_if_raising():
            return await self.services.delivery.fixed(
                care_reply(call.accept_language), CARE_VERSION, call.body, call.account, call.turn, call.headers,
                resumable=call.resumable, shape=call.shape,
            )  # fmt: skip

    async def retrieved(self, call: ChatCall) -> None:
        """Passages from the named stores join the request as context, after the ask itself was screened
        (functions/retrieval/context.py)."""
        async with call.account.closed_if_raising():
            call.retrieved = await self.services.retrieval.retrieve(
                call.plan, call.caller, call.body, call.pool, call.account.request_id
            )
        call.body = call.retrieved.apply(call.body)
        call.headers.update(call.retrieved.headers)
        if call.turn is not None:
            call.turn.citations = call.retrieved.stored

    async def cached(self, call: ChatCall) -> ChatResult | None:
        """A deterministic request may be answered from the result cache, keyed on the version that would answer it
        (after auth, limits and safety: a hit still counts against limits and was screened; docs/result-cache.md)."""
        s = self.services
        call.chosen = s.canaries.choose(call.pool, call.session)
        post_policy = s.safety.post_policy_version
        async with call.account.closed_if_raising():
            call.cached = await s.result_cache.lookup(
                call.caller.tenant, call.pool, call.chosen.version, post_policy, call.body, call.cache_control
            )
            call.headers[CACHE_HEADER] = call.cached.outcome.value
            if call.cached.hit is None:
                return None
            call.headers[MODEL_VERSION_HEADER] = call.cached.hit.model_version
            return await s.delivery.hit(
                call.cached.hit,
                call.body,
                call.account,
                call.turn,
                call.headers,
                resumable=call.resumable,
                shape=call.shape,
            )

    async def placed(self, call: ChatCall) -> None:
        """A place in the pool, by priority (waiting if it is busy), or overflow to the tier's next pool (announced
        in a header, billed as the model that answered)."""
        tenant = call.caller.tenant
        async with call.account.closed_if_raising():
            placed = await self.services.pool_control.place(
                tenant.id, queue_tier(tenant.tier), call.pool, call.body, lambda: self._fallback(call), call.receive
            )
        call.overflowed = placed.overflowed_from is not None
        if call.overflowed:
            call.pool, call.body = placed.pool, placed.body
            call.account.model = call.pool
            call.headers[FALLBACK_HEADER] = call.pool
        call.slot = placed.slot

    async def answered(self, call: ChatCall) -> tuple[Answer, VersionChoice]:
        """The worker's answer (an open stream or a whole body) from the pool's chosen version; a pool without a
        reachable replica leaves the answer to the tier's next pool; a structured answer is valid (or asked once more)
        before it is billed."""
        s, account = self.services, call.account
        async with account.closed_if_raising(), call.slot.released_if_raising():
            try:
                answer, version = await self._answer(
                    call.pool, call.body, call, continuation=True, chosen=None if call.overflowed else call.chosen
                )
            except NoReplicaReachableError:
                fallback = self._fallback(call)
                if fallback is None:
                    raise
                fallback_pool, fallback_body = fallback
                answer, version = await self._answer(fallback_pool, fallback_body, call, continuation=False)
                s.pool_control.count_downgrade(call.caller.tenant.tier, call.pool, fallback_pool, "unreachable")
                account.model = fallback_pool  # billed as the model that answered
                call.headers[FALLBACK_HEADER] = fallback_pool
            if call.contract is not None and isinstance(answer, dict):
                answer = await s.structured.settled(
                    answer,
                    call.contract,
                    lambda: self._answer(call.pool, call.body, call, continuation=False, with_tools=False),
                    account.model,
                    call.body,
                )
        account.model_version = call.headers[MODEL_VERSION_HEADER] = version.version  # stored with the answer
        return answer, version

    async def delivered(self, call: ChatCall, answer: Answer, version: VersionChoice) -> ChatResult:
        """The answer to its client through the post-filter, stored with the turn and settled in the ledger
        (functions/chat/delivery.py): a JSON body, or a worker's stream (or a server-tool answer replayed as one)."""
        s, account, session = self.services, call.account, call.session

        async def repair(retry: ChatCompletionRequest) -> dict[str, Any]:
            """functions/chat/tool_arguments.py's one repair attempt, on the pool that answered."""
            retry = retry.model_copy(update={"model": account.model})
            return await s.chat.complete(s.chat.route(account.model, retry, session))

        answered = AnsweredRequest(
            caller=call.caller,
            body=call.body,
            account=account,
            turn=call.turn,
            headers=call.headers,
            answer=answer,
            version=version,
            slot=call.slot,
            cached=call.cached,
            retrieved=call.retrieved,
            contract=call.contract,
            tool_contract=client_contract(call.body, call.server_tools or ()),
            repair=repair,
            shadow=None if call.judge_call else s.shadow_judge,
            resumable=call.resumable,
            shape=call.shape,
        )
        if isinstance(answer, dict):
            return await s.delivery.json(answered)
        return s.delivery.stream(answered)

    def _fallback(self, call: ChatCall) -> tuple[str, ChatCompletionRequest] | None:
        """The tier's next pool and the request as it would go there (functions/chat/service.py)."""
        contexts = self.services.accounting.admission.context_tokens
        return self.services.chat.fallback(call.caller.tenant, call.pool, call.body, call.asked_max_tokens, contexts)

    def _fallback_route(self, call: ChatCall) -> RoutedRequest | None:
        """Where an answer from the call's pool continues if none of its replicas can
        (functions/chat/streams/continuation.py)."""
        found = self._fallback(call)
        return self.services.chat.route(found[0], found[1], call.session) if found is not None else None

    async def _answer(
        self,
        pool: str,
        body: ChatCompletionRequest,
        call: ChatCall,
        *,
        continuation: bool,
        chosen: VersionChoice | None = None,
        with_tools: bool = True,
    ) -> tuple[Answer, VersionChoice]:
        """The worker's answer from `pool` (an open stream, continued on the fallback route if the pool cannot finish
        it, or the whole completion body) and the model version (the pool's canary or its stable version) that gives
        it; `chosen`: the version already chosen for this request (the result cache looked it up under that one)."""
        s = self.services
        tools = call.tools if with_tools else None
        fallback: Callable[[], RoutedRequest | None] | None = (
            (lambda: self._fallback_route(call)) if continuation else None
        )
        version = chosen or s.canaries.choose(pool, call.session)
        for attempt in (version, s.canaries.stable(pool)):  # an unreachable canary leaves the answer to the stable one
            routed = s.chat.route(attempt.ring, body, call.session)
            answer: Awaitable[Answer]
            if tools is not None:  # rounds with the gateway's own tools (functions/chat/server_tools/loop.py)
                answer = tools.answer(s.chat.complete, routed, streamed=bool(body.stream))
            else:
                # Several choices are not continued on another replica (functions/chat/choices.py).
                continuations = 0 if body.n > 1 else None
                answer = (
                    s.chat.open_stream(routed, fallback, continuations=continuations)
                    if body.stream
                    else s.chat.complete(routed)
                )
            try:
                return await s.canaries.observe(attempt, answer, streamed=bool(body.stream)), attempt
            except NoReplicaReachableError:
                if not attempt.canary:
                    raise
        raise AssertionError("unreachable")


def _prompt_cache_key(body: ChatCompletionRequest) -> str | None:
    key = (body.model_extra or {}).get("prompt_cache_key")
    return key if isinstance(key, str) and key else None

"""`POST /v1/completions` through the gateway: the same auth, limits, safety, placement and ledger as chat, for a prompt
instead of messages (docs/completions.md).

In order: unknown fields and bad values are 400s; the tier's pool for the model; token-id prompts read back as text
on one of its workers (vLLM's `/detokenize`) so the pre-filter judges what the model will read; admission counts the
prompts and reserves the output (429 otherwise); the pre-filter screens the prompts; a place in the pool; the worker
answers; the post-filter reads each generated text (never the client's own echoed prompt); the ledger gets one entry
with the worker's usage. Completions are not stored as conversations and not served from the result cache; a
replica that dies mid-stream ends the stream with an error event (no continuation: docs/completions.md).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Receive

from functions.accounts.auth import Caller
from functions.chat.service import ChatService
from functions.chat.streams.continuation import BROKE_MESSAGE
from functions.control.batch_lines import queue_tier
from functions.control.pool_admission import Slot
from functions.control.pool_overflow import PoolControl
from functions.control.request_accounting import Accounting, RequestAccount, TokenUsage
from functions.control.routing import pools_for_tier, resolve_pool
from functions.safety.pipeline import SafetyPipeline
from functions.safety.stream_guard import StreamGuard
from functions.worker_client import UpstreamBrokeError
from shared.errors import ContentPolicyViolationError, FleetchatError, InvalidRequestError, UpstreamError
from shared.storage.ledger import Outcome
from shared.wire.completions_api import Completion, CompletionRequest, DetokenizeResponse
from shared.wire.openai_shape import with_required_nulls
from shared.wire.schemas import ChatCompletionRequest
from shared.wire.sse import DONE, sse_error, sse_json

COMPLETIONS_PATH = "/v1/completions"
DETOKENIZE_PATH = "/detokenize"


@dataclass
class CompletionAnswer:
    """A whole answer (`body`) or an open stream (`events`), with the headers the client gets either way."""

    headers: dict[str, str]
    body: dict[str, Any] | None = None
    events: AsyncIterator[bytes] | None = None


@dataclass
class _Call:
    caller: Caller
    body: CompletionRequest
    pool: str = ""
    texts: list[str] = field(default_factory=list)  # each prompt as the model reads it
    account: RequestAccount | None = None


class CompletionsService:
    def __init__(
        self, chat: ChatService, accounting: Accounting, safety: SafetyPipeline, pool_control: PoolControl
    ) -> None:
        self.chat = chat
        self.accounting = accounting
        self.safety = safety
        self.pool_control = pool_control

    async def answer(self, caller: Caller, body: CompletionRequest, receive: Receive) -> CompletionAnswer:
        extra = sorted(body.model_extra or {})
        if extra:
            raise InvalidRequestError(f"Unrecognized request argument supplied: {extra[0]}", param=extra[0])
        call = _Call(caller, body, pool=resolve_pool(caller.tenant.tier, body.model, self.chat.router.pools))
        call.texts = await self._texts(call)
        as_chat = self._as_chat(call)
        account = call.account = await self.accounting.open(caller, as_chat, call.pool)
        async with account.closed_if_raising():
            try:
                await self.safety.screen(caller, as_chat, account.request_id, call.pool)
            except ContentPolicyViolationError as refused:
                await account.close(TokenUsage(0, 0), Outcome.FILTERED)
                refused.param = "prompt"
                raise
            placed = await self.pool_control.place(
                caller.tenant.id, queue_tier(caller.tenant.tier), call.pool, as_chat, lambda: None, receive
            )
        slot = placed.slot
        async with account.closed_if_raising(), slot.released_if_raising():
            worker_body = self._worker_body(call)
            replicas = self.chat.router.candidates(call.pool, None)
            headers = {"x-request-id": account.request_id}
            if body.stream:
                upstream = await self.chat.workers.open_stream(
                    call.pool, replicas, worker_body, headers, path=COMPLETIONS_PATH
                )
                events = self._relay(call, upstream.raw_events(), slot)
                return CompletionAnswer(headers=account.headers, events=events)
            answer = await self.chat.workers.complete(call.pool, replicas, worker_body, headers, path=COMPLETIONS_PATH)
        slot.release()
        return CompletionAnswer(headers=account.headers, body=await self._settled(call, answer))

    async def tokenizer(self, caller: Caller, model: str | None, path: str, body: dict[str, Any] | None) -> Any:
        """vLLM's `/tokenize`, `/detokenize` (POST `body`) or `/tokenizer_info` (GET: `body` None) from one of the
        model's workers; no model: the tier's first pool (lm-evaluation-harness's remote tokenizer names none).
        Nothing generated, nothing billed."""
        pools = pools_for_tier(caller.tenant.tier, self.chat.router.pools)
        if model is None and not pools:
            raise InvalidRequestError("No model is available to this key's tier.", param="model")
        pool = resolve_pool(caller.tenant.tier, model, self.chat.router.pools) if model is not None else pools[0]
        replicas = self.chat.router.candidates(pool, None)
        sent = {**body, "model": pool} if body is not None else {}
        method = "POST" if body is not None else "GET"
        return await self.chat.workers.complete(pool, replicas, sent, {}, path=path, method=method)

    async def _texts(self, call: _Call) -> list[str]:
        """Each prompt as text: token ids read back by one of the pool's workers (what the model will read)."""
        texts = []
        for prompt in call.body.prompts():
            if isinstance(prompt, str):
                texts.append(prompt)
                continue
            replicas = self.chat.router.candidates(call.pool, None)
            try:
                read = await self.chat.workers.complete(
                    call.pool, replicas, {"model": call.pool, "tokens": prompt}, {}, path=DETOKENIZE_PATH
                )
            except FleetchatError as refused:
                if refused.param == "tokens":  # out of the vocabulary: the client's prompt, by the client's name
                    refused.param = "prompt"
                raise
            texts.append(DetokenizeResponse.model_validate(read).prompt)
        return texts

    def _as_chat(self, call: _Call) -> ChatCompletionRequest:
        """The prompts as the chat path's admission and pre-filter read a request: one user message each, and the
        output budget of every prompt together."""
        wanted = call.body.max_tokens
        return ChatCompletionRequest(
            model=call.pool,
            messages=[{"role": "user", "content": text} for text in call.texts],  # type: ignore[misc]
            max_tokens=max(1, wanted) * len(call.texts) if wanted is not None else None,
            n=call.body.n,  # admission reserves each choice's budget and holds n to the tier's max_choices
        )

    def _worker_body(self, call: _Call) -> dict[str, Any]:
        body = call.body.model_dump(exclude_none=True)
        body["model"] = call.pool
        body.pop("user", None)
        granted = call.account.reservation.max_tokens if call.account is not None else None
        if granted is not None and body.get("max_tokens"):
            body["max_tokens"] = max(1, min(body["max_tokens"], granted // max(1, len(call.texts))))
        if call.body.stream:  # usage on every chunk: the ledger bills what was generated, aborts included
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        return body

    async def _settled(self, call: _Call, answer: dict[str, Any]) -> dict[str, Any]:
        """The worker's answer after the post-filter, billed once."""
        assert call.account is not None
        try:
            completion = Completion.model_validate(answer)
        except ValueError as exc:
            await call.account.close(None, Outcome.FAILED)
            raise UpstreamError("The model worker returned an unreadable response.") from exc
        outcome = Outcome.COMPLETED
        for choice in completion.choices:
            echoed = self._echo(call, choice.index)
            generated = choice.text[len(echoed) :] if choice.text.startswith(echoed) else choice.text
            sent, finding = self.safety.guard(call.caller).scan(generated)
            if finding is not None:
                await self.safety.halted(finding, call.caller, call.account.request_id, call.pool)
                choice.text = echoed + generated[:sent]
                choice.finish_reason = "content_filter"
                choice.logprobs = None
                outcome = Outcome.FILTERED
        usage = completion.usage.model_dump() if completion.usage is not None else None
        await call.account.close(TokenUsage.from_openai(usage), outcome)
        return with_required_nulls(completion.model_dump(exclude_none=True))

    @staticmethod
    def _echo(call: _Call, index: int) -> str:
        """The prompt choice `index` echoes ('' without `echo`): choice `p * n + i` answers prompt `p`."""
        prompt = index // call.body.n
        return call.texts[prompt] if call.body.echo and prompt < len(call.texts) else ""

    async def _relay(self, call: _Call, events: AsyncIterator[bytes], slot: Slot) -> AsyncIterator[bytes]:
        """The worker's chunks to the client through the post-filter (each choice read by a guard of its own); billed
        at [DONE], at a halt, or (for what was generated) when the client leaves; the place in the pool is given back
        at the end, whatever ends it."""
        account = call.account
        assert account is not None
        guards: dict[int, StreamGuard] = {}
        wants_usage = bool(call.body.stream_options and call.body.stream_options.include_usage)
        echoes = {index: self._echo(call, index) for index in range(len(call.texts) * call.body.n)}
        finished: set[int] = set()
        usage: dict[str, Any] | None = None
        outcome = Outcome.ABORTED
        try:
            async for event in events:
                if event == DONE:
                    outcome = Outcome.COMPLETED
                    yield DONE
                    return
                if event.startswith(b"event: error"):
                    outcome = Outcome.FAILED
                    yield event
                    continue
                chunk = _chunk(event)
                if chunk is None:
                    yield event
                    continue
                usage = chunk.get("usage") or usage
                finding = None
                for choice in chunk.get("choices") or []:
                    index, text = int(choice.get("index", 0)), str(choice.get("text") or "")
                    echo = echoes.get(index, "")
                    generated = text[len(echo) :] if echo and text.startswith(echo) else text
                    echoes[index] = "" if echo and text.startswith(echo) else echo
                    guard = guards.setdefault(index, self.safety.guard(call.caller))
                    if generated and (finding := guard.check(generated)) is not None:
                        break
                if finding is not None:
                    await self.safety.halted(finding, call.caller, account.request_id, call.pool)
                    outcome = Outcome.FILTERED
                    yield sse_json(_filtered(chunk, sorted(set(echoes) - finished)))
                    yield DONE
                    return
                finished.update(int(c.get("index", 0)) for c in chunk.get("choices") or [] if c.get("finish_reason"))
                if chunk.get("choices") == []:  # the worker's final usage chunk
                    if wants_usage:
                        yield event
                    continue
                if wants_usage:
                    chunk["usage"] = None  # OpenAI's shape: usage only on the last chunk
                else:
                    chunk.pop("usage", None)
                yield sse_json(chunk)
        except UpstreamBrokeError:
            outcome = Outcome.FAILED
            yield sse_error(UpstreamError(BROKE_MESSAGE))
            yield DONE
        finally:
            slot.release()
            failed_unbilled = outcome is Outcome.FAILED and usage is None
            await account.close(None if failed_unbilled else TokenUsage.from_openai(usage), outcome)


def _chunk(event: bytes) -> dict[str, Any] | None:
    if not event.startswith(b"data: {"):
        return None
    try:
        return json.loads(event[len(b"data: ") :])
    except ValueError:
        return None


def _filtered(chunk: dict[str, Any], unfinished: list[int]) -> dict[str, Any]:
    """The chunk that ends a halted stream: every choice still open ends with no more text, finish reason
    `content_filter` (the halt stops the whole request)."""
    choices = [{"index": i, "text": "", "logprobs": None, "finish_reason": "content_filter"} for i in unfinished]
    return {key: chunk[key] for key in ("id", "object", "created", "model") if key in chunk} | {"choices": choices}

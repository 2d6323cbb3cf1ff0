"""Chat-completions serving logic of the worker: validate against the model, run the engine, shape OpenAI output."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gpu_workers.engine import Engine, EngineError, SamplingParams, TokenLogprobs
from gpu_workers.server.metrics import WorkerMetrics
from gpu_workers.server.text_output import TextAssembler
from gpu_workers.server.tool_calls import ToolPlan, ToolStreamParser, parse_output, plan_for, render_messages
from shared.errors import ContextLengthExceededError, InvalidRequestError, ModelNotFoundError, UpstreamError
from shared.wire.output_schemas import OutputContract
from shared.wire.sampling_api import ChoiceLogprobs, TokenLogprob, TopLogprob
from shared.wire.schemas import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChunkChoice,
    DeltaMessage,
    PromptTokensDetails,
    Usage,
)
from shared.wire.sse import DONE, sse_data, sse_error
from shared.wire.tools_api import check_tool_request


@dataclass
class PreparedRequest:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    stop: list[str]
    tools: ToolPlan | None = None  # function calling (gpu_workers/server/tool_calls.py)


# (text delta, finish reason, generated tokens so far, cached tokens, log-probabilities of the tokens since the last)
RunStep = tuple[str, str | None, int, int, list[TokenLogprobs]]


class ChatServing:
    def __init__(self, engine: Engine, metrics: WorkerMetrics) -> None:
        self.engine = engine
        self.metrics = metrics

    def prepare(self, request: ChatCompletionRequest) -> PreparedRequest:
        """Everything that can fail with a 4xx fails here, before the engine sees the request."""
        if request.model != self.engine.model_name:
            raise ModelNotFoundError(f"The model `{request.model}` does not exist.", param="model")
        check_tool_request(request.tools, request.tool_choice, request.parallel_tool_calls, request.messages)
        contract = OutputContract.of(request.response_format)  # a bad schema is a 400 before any token is spent
        plan = plan_for(request)
        # Tool definitions and tool turns in SmolLM2's own format (they count as prompt tokens: they are the prompt).
        messages = render_messages(request.messages, plan)
        continuing = bool(request.continue_final_message)  # the schema refused it beside add_generation_prompt
        prefill = plan.prefill() if plan is not None and not continuing else ""
        if prefill:  # a forced call opens the answer with the model's own marker (the prompt's last, open message)
            messages.append({"role": "assistant", "content": prefill})
        try:
            prompt_ids = self.engine.tokenize_chat(
                messages,
                add_generation_prompt=not continuing and not prefill and request.add_generation_prompt is not False,
                continue_final=continuing or bool(prefill),
            )
        except Exception as exc:  # a template that rejects the role order, or drops the message to continue
            raise InvalidRequestError(f"Could not render the messages: {exc}", param="messages") from exc
        limit = self.engine.max_model_len
        if len(prompt_ids) >= limit:
            raise ContextLengthExceededError(
                f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
                f"{len(prompt_ids)} tokens. Please reduce the length of the messages.",
                param="messages",
            )
        wanted = request.output_limit()
        if wanted is not None and len(prompt_ids) + wanted > limit:
            raise ContextLengthExceededError(
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{len(prompt_ids) + wanted} tokens ({len(prompt_ids)} in the messages, {wanted} in the completion). "
                "Please reduce the length of the messages or completion.",
                param="max_tokens",
            )
        params = sampling_params(
            request,
            self.engine,
            max_tokens=wanted if wanted is not None else limit - len(prompt_ids),
            # A continuation (another replica's half answer in the prompt) is not constrained: a grammar restarted
            # mid-value would force a second value; the gateway validates the joined answer at its end instead. A
            # forced tool call's arguments schema wins over `response_format`, as in vLLM.
            json_schema=None if continuing else _constraint(plan, contract),
        )
        return PreparedRequest(f"chatcmpl-{uuid.uuid4().hex}", prompt_ids, params, request.stop_sequences(), plan)

    def logprob_entries(self, entries: list[TokenLogprobs]) -> list[TokenLogprob]:
        """Engine log-probabilities as OpenAI's entries: each token's text and its own bytes."""
        return [
            TokenLogprob(
                **self._token(entry.token_id, entry.logprob),
                top_logprobs=[TopLogprob(**self._token(token, logprob)) for token, logprob in entry.top],
            )
            for entry in entries
        ]

    def _token(self, token_id: int, logprob: float) -> dict[str, Any]:
        raw = self.engine.token_bytes(token_id)
        # A token that holds part of a UTF-8 character reads as U+FFFD, as in vLLM; its bytes are exact.
        return {"token": raw.decode("utf-8", errors="replace"), "logprob": max(logprob, -9999.0), "bytes": list(raw)}

    async def _run(self, prepared: PreparedRequest) -> AsyncIterator[RunStep]:
        """Yield (text delta, finish_reason, generated tokens so far, cached tokens, log-probabilities of the tokens
        since the last yield); record latency metrics."""
        labels = {"model_name": self.engine.model_name}
        assembler = TextAssembler(self.engine.decode, prepared.stop)
        start = last = time.perf_counter()
        generated = cached = 0
        finish: str | None = None
        pending: list[TokenLogprobs] = []  # entries of tokens whose text is held back (a stop string may follow)
        stream = self.engine.generate(prepared.request_id, prepared.prompt_ids, prepared.params)
        try:
            async for out in stream:
                now = time.perf_counter()
                if out.generated_total and generated == 0:
                    self.metrics.ttft.labels(**labels).observe(now - start)
                elif out.generated_total > generated:
                    self.metrics.itl.labels(**labels).observe(now - last)
                last, generated, cached = now, out.generated_total, out.cached_tokens
                text = assembler.feed(out.new_token_ids)
                pending += out.logprobs or []
                if assembler.stopped:
                    finish = "stop"
                elif out.finished:
                    text += assembler.flush()
                    finish = out.finish_reason
                if text or finish:
                    yield text, finish, generated, cached, pending
                    pending = []
                if finish:
                    return
        finally:
            await stream.aclose()  # aborts the engine request (frees its KV blocks) if it is still running
            self.metrics.prompt_tokens.labels(**labels).inc(len(prepared.prompt_ids))
            self.metrics.generation_tokens.labels(**labels).inc(generated)
            self.metrics.e2e.labels(**labels).observe(time.perf_counter() - start)
            self.metrics.request_success.labels(finished_reason=finish or "abort", **labels).inc()

    def _usage(self, prepared: PreparedRequest, generated: int, cached: int) -> Usage:
        prompt = len(prepared.prompt_ids)
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=generated,
            total_tokens=prompt + generated,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
        )

    async def complete(
        self, prepared: PreparedRequest, is_disconnected: Callable[[], Awaitable[bool]]
    ) -> ChatCompletion | None:
        """Non-streaming: collect the whole answer; if the client goes away meanwhile, abort and return None."""

        entries: list[TokenLogprobs] = []

        async def collect() -> tuple[str, str | None, int, int]:
            parts: list[str] = []
            last: tuple[str | None, int, int] = (None, 0, 0)
            async with contextlib.aclosing(self._run(prepared)) as run:
                async for text, finish, generated, cached, logprobs in run:
                    parts.append(text)
                    entries.extend(logprobs)
                    last = (finish, generated, cached)
            return "".join(parts), *last

        task = asyncio.create_task(collect())
        while not task.done():
            done, _ = await asyncio.wait({task}, timeout=0.5)
            if not done and await is_disconnected():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return None
        try:
            text, finish, generated, cached = task.result()
        except EngineError as exc:
            raise UpstreamError(f"generation failed: {exc}") from exc
        message = AssistantMessage(content=text)
        if prepared.tools is not None:
            content, calls = parse_output(text, prepared.tools)
            if calls:
                message = AssistantMessage(content=content, tool_calls=calls)
                finish = "tool_calls" if finish == "stop" else finish
        logprobs = None
        if prepared.params.logprobs is not None:
            logprobs = ChoiceLogprobs(content=self.logprob_entries(entries))
        return ChatCompletion(
            id=prepared.request_id,
            model=self.engine.model_name,
            choices=[Choice(message=message, finish_reason=finish, logprobs=logprobs)],
            usage=self._usage(prepared, generated, cached),
        )

    async def stream(
        self, prepared: PreparedRequest, include_usage: bool, *, continuous_usage: bool = False
    ) -> AsyncIterator[bytes]:
        """SSE chunks: a role chunk, content chunks, the finish chunk, then usage (if asked) and [DONE].

        With `continuous_usage` (vLLM's `continuous_usage_stats`) every chunk also carries the usage so far.

        An engine failure mid-stream becomes an in-band error event; the stream still ends with [DONE].
        """
        rid, model = prepared.request_id, self.engine.model_name
        created = int(time.time())

        generated = cached = 0

        wants_logprobs = prepared.params.logprobs is not None

        def chunk(delta: DeltaMessage, finish: str | None = None, entries: list[TokenLogprobs] | None = None) -> bytes:
            logprobs = ChoiceLogprobs(content=self.logprob_entries(entries or [])) if entries else None
            return sse_data(
                ChatCompletionChunk(
                    id=rid,
                    created=created,
                    model=model,
                    choices=[ChunkChoice(delta=delta, finish_reason=finish, logprobs=logprobs)],
                    usage=self._usage(prepared, generated, cached) if continuous_usage else None,
                )
            )

        yield chunk(DeltaMessage(role="assistant", content=""))
        parser = ToolStreamParser(prepared.tools) if prepared.tools is not None else None
        held: list[TokenLogprobs] = []  # log-probabilities of text the tool-call parser has not released yet
        try:
            async with contextlib.aclosing(self._run(prepared)) as run:
                async for text, finish, generated_so_far, cached_so_far, entries in run:
                    generated, cached = generated_so_far, cached_so_far
                    held += entries if wants_logprobs else []
                    if parser is None:
                        delta = DeltaMessage(content=text) if text else DeltaMessage()
                        yield chunk(delta, finish, held)
                        held = []
                        continue
                    content, calls = parser.feed(text)
                    if finish:
                        tail, calls = parser.finish()
                        content += tail
                        finish = "tool_calls" if calls and finish == "stop" else finish
                    if content or calls or finish:
                        yield chunk(DeltaMessage(content=content or None, tool_calls=calls or None), finish, held)
                        held = []
        except EngineError as exc:
            yield sse_error(UpstreamError(f"generation failed: {exc}"))
            yield DONE
            return
        if include_usage:
            usage = self._usage(prepared, generated, cached)
            yield sse_data(ChatCompletionChunk(id=rid, created=created, model=model, choices=[], usage=usage))
        yield DONE


def sampling_params(
    request: ChatCompletionRequest, engine: Engine, *, max_tokens: int, json_schema: dict[str, Any] | None
) -> SamplingParams:
    """The request's sampling as the engine takes it; a 400 for a parameter this engine cannot honour or a token id
    outside its vocabulary."""
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        seed=request.seed,
        json_schema=json_schema,
        top_k=-1 if request.top_k in (None, 0) else request.top_k,
        min_p=request.min_p or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        presence_penalty=request.presence_penalty or 0.0,
        repetition_penalty=1.0 if request.repetition_penalty is None else request.repetition_penalty,
        logit_bias=request.bias_by_token(),
        min_tokens=min(request.min_tokens or 0, max_tokens),
        ignore_eos=bool(request.ignore_eos),
        stop_token_ids=list(request.stop_token_ids or []),
        logprobs=request.logprobs_wanted(),
    )
    unhonoured = sorted(params.extended() - engine.honours)
    if unhonoured:
        raise InvalidRequestError(
            f"'{unhonoured[0]}' is not supported by this pool's engine; leave it unset.",
            param=unhonoured[0],
            code="unsupported_parameter",
        )
    vocab = engine.vocab_size
    for name, tokens in (("logit_bias", params.logit_bias), ("stop_token_ids", params.stop_token_ids)):
        outside = sorted(t for t in tokens if t >= vocab)
        if outside:
            raise InvalidRequestError(
                f"token id {outside[0]} in {name} is out of vocabulary (the model has {vocab} tokens)", param=name
            )
    return params


def completion_body(completion: ChatCompletion) -> dict[str, object]:
    """The JSON body of a whole answer: unset fields left out, but a tool-calling message keeps `content: null`."""
    body = completion.model_dump(exclude_none=True)
    for choice, dumped in zip(completion.choices, body["choices"], strict=True):
        if choice.message.tool_calls:
            dumped["message"]["content"] = choice.message.content
    return body


def _constraint(plan: ToolPlan | None, contract: OutputContract | None) -> dict[str, Any] | None:
    """The JSON schema the answer is decoded under: a forced tool call's, else the response format's, else none."""
    forced = plan.json_schema() if plan is not None else None
    if forced is not None:
        return forced
    return contract.schema if contract is not None else None

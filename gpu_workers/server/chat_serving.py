"""Chat-completions serving logic of the worker: validate against the model, run the engine, shape OpenAI output."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gpu_workers.engine import Engine, EngineError, TokenLogprobs
from gpu_workers.server.generation import Generation, PreparedRequest, sampling_params, too_long, usage_of
from gpu_workers.server.metrics import WorkerMetrics
from gpu_workers.server.tool_calls import ToolPlan, ToolStreamParser, parse_output, plan_for, render_messages
from shared.errors import ContextLengthExceededError, InvalidRequestError, ModelNotFoundError, UpstreamError
from shared.wire.openai_shape import with_required_nulls
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
    Usage,
)
from shared.wire.sse import DONE, sse_data, sse_error
from shared.wire.tools_api import check_tool_request


@dataclass
class PreparedChat(PreparedRequest):
    tools: ToolPlan | None = None  # function calling (gpu_workers/server/tool_calls.py)


class ChatServing:
    def __init__(self, engine: Engine, metrics: WorkerMetrics) -> None:
        self.engine = engine
        self.metrics = metrics
        self.generation = Generation(engine, metrics)

    def prepare(self, request: ChatCompletionRequest) -> PreparedChat:
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
            raise too_long(limit, len(prompt_ids), wanted, what="messages", param="max_tokens")
        params = sampling_params(
            request,
            self.engine,
            max_tokens=wanted if wanted is not None else limit - len(prompt_ids),
            temperature=request.temperature,
            top_p=request.top_p,
            seed=request.seed,
            # A continuation (another replica's half answer in the prompt) is not constrained: a grammar restarted
            # mid-value would force a second value; the gateway validates the joined answer at its end instead. A
            # forced tool call's arguments schema wins over `response_format`, as in vLLM.
            json_schema=None if continuing else _constraint(plan, contract),
            logprobs=request.logprobs_wanted(),
        )
        return PreparedChat(f"chatcmpl-{uuid.uuid4().hex}", prompt_ids, params, request.stop_sequences(), plan)

    def logprob_entries(self, entries: list[TokenLogprobs]) -> list[TokenLogprob]:
        """Engine log-probabilities as OpenAI's entries: each token's text and its own bytes."""
        token = self.generation.token
        return [
            TokenLogprob(
                **token(entry.token_id, entry.logprob),
                top_logprobs=[TopLogprob(**token(t, logprob)) for t, logprob in entry.top],
            )
            for entry in entries
        ]

    def _usage(self, prepared: PreparedChat, generated: int, cached: int) -> Usage:
        return usage_of(len(prepared.prompt_ids), generated, cached)

    async def complete(
        self, prepared: PreparedChat, is_disconnected: Callable[[], Awaitable[bool]]
    ) -> ChatCompletion | None:
        """Non-streaming: collect the whole answer; if the client goes away meanwhile, abort and return None."""

        entries: list[TokenLogprobs] = []

        async def collect() -> tuple[str, str | None, int, int]:
            parts: list[str] = []
            last: tuple[str | None, int, int] = (None, 0, 0)
            async with contextlib.aclosing(self.generation.run(prepared)) as run:
                async for step in run:
                    parts.append(step.text)
                    entries.extend(step.logprobs)
                    last = (step.finish, step.generated, step.cached)
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
        self, prepared: PreparedChat, include_usage: bool, *, continuous_usage: bool = False
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
            async with contextlib.aclosing(self.generation.run(prepared)) as run:
                async for step in run:
                    text, finish, generated, cached = step.text, step.finish, step.generated, step.cached
                    held += step.logprobs if wants_logprobs else []
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


def completion_body(completion: ChatCompletion) -> dict[str, object]:
    """The JSON body of a whole answer: unset fields left out, but a tool-calling message keeps `content: null` and
    OpenAI's required nulls stay (shared/wire/openai_shape.py)."""
    body = completion.model_dump(exclude_none=True)
    for choice, dumped in zip(completion.choices, body["choices"], strict=True):
        if choice.message.tool_calls:
            dumped["message"]["content"] = choice.message.content
    return with_required_nulls(body)


def _constraint(plan: ToolPlan | None, contract: OutputContract | None) -> dict[str, Any] | None:
    """The JSON schema the answer is decoded under: a forced tool call's, else the response format's, else none."""
    forced = plan.json_schema() if plan is not None else None
    if forced is not None:
        return forced
    return contract.schema if contract is not None else None

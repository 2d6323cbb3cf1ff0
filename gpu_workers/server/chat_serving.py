"""Chat-completions serving logic of the worker: validate against the model, run the engine, shape OpenAI output.

`n` > 1: the choices are sequences of one prompt. The first (the leader) is submitted alone; once it has produced its
first step its prompt's KV blocks are in the engine's prefix cache, and the others (the followers) are submitted then,
so they copy those blocks instead of computing the prompt again (vLLM's parallel sampling shares them the same way).
A seed `s` gives choice `i` the seed `s + i`: reproducible, and the choices differ."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from gpu_workers.engine import Engine, EngineError, TokenLogprobs
from gpu_workers.server.generation import (
    ChoiceResult,
    Generation,
    PreparedRequest,
    RunStep,
    leader_first,
    leader_first_streams,
    sampling_params,
    too_long,
    usage_of,
)
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
    n: int = 1  # choices: sequences of the same prompt

    def choices(self) -> list[PreparedChat]:
        """One run per choice: its own engine request id and seed (choice 0 is the request itself)."""
        runs: list[PreparedChat] = [self]
        for index in range(1, self.n):
            seed = None if self.params.seed is None else self.params.seed + index
            params = self.params.model_copy(update={"seed": seed})
            runs.append(replace(self, request_id=f"{self.request_id}-{index}", params=params, n=1))
        return runs


@dataclass(frozen=True)
class Delta:
    """One chunk's worth of one choice: what it says, how it ended, its tokens' log-probabilities, and the run's
    counts so far."""

    message: DeltaMessage
    finish: str | None
    entries: list[TokenLogprobs]
    step: RunStep


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
        return PreparedChat(
            f"chatcmpl-{uuid.uuid4().hex}", prompt_ids, params, request.stop_sequences(), plan, n=request.n
        )

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

    async def _collect(self, prepared: PreparedChat, started: asyncio.Event | None = None) -> ChoiceResult:
        """One choice's whole run; `started` is set at its first step (its prompt is in the prefix cache by then)."""
        run = ChoiceResult()
        parts: list[str] = []
        async with contextlib.aclosing(self.generation.run(prepared)) as steps:
            async for step in steps:
                if started is not None:
                    started.set()
                parts.append(step.text)
                run.entries.extend(step.logprobs)
                run.finish, run.generated, run.cached = step.finish, step.generated, step.cached
        run.text = "".join(parts)
        return run

    async def _collect_all(self, prepared: PreparedChat) -> list[ChoiceResult]:
        """Every choice's run: the leader first, the followers once its prompt is cached (module docstring)."""
        return await leader_first(prepared.choices(), self._collect)

    async def complete(
        self, prepared: PreparedChat, is_disconnected: Callable[[], Awaitable[bool]]
    ) -> ChatCompletion | None:
        """Non-streaming: collect the whole answer (every choice); if the client goes away meanwhile, abort and
        return None."""
        task = asyncio.create_task(self._collect_all(prepared))
        try:
            while not task.done():
                done, _ = await asyncio.wait({task}, timeout=0.5)
                if not done and await is_disconnected():
                    return None
        finally:
            if not task.done():  # the client left, or this handler was cancelled (shutdown): stop every choice
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        try:
            runs = task.result()
        except EngineError as exc:
            raise UpstreamError(f"generation failed: {exc}") from exc
        choices = [self._choice(prepared, index, run) for index, run in enumerate(runs)]
        generated = sum(run.generated for run in runs)
        return ChatCompletion(
            id=prepared.request_id,
            model=self.engine.model_name,
            choices=choices,
            usage=self._usage(prepared, generated, runs[0].cached),  # the prompt counts once, as in vLLM
        )

    def _choice(self, prepared: PreparedChat, index: int, run: ChoiceResult) -> Choice:
        message, finish = AssistantMessage(content=run.text), run.finish
        if prepared.tools is not None:
            content, calls = parse_output(run.text, prepared.tools)
            if calls:
                message = AssistantMessage(content=content, tool_calls=calls)
                finish = "tool_calls" if finish == "stop" else finish
        logprobs = None
        if prepared.params.logprobs is not None:
            logprobs = ChoiceLogprobs(content=self.logprob_entries([e for e in run.entries if e is not None]))
        return Choice(index=index, message=message, finish_reason=finish, logprobs=logprobs)

    async def _deltas(self, prepared: PreparedChat, started: asyncio.Event | None = None) -> AsyncIterator[Delta]:
        """One choice's stream: its deltas (tool calls parsed out of its text), each with the run's counts so far;
        `started` is set at its first step."""
        wants_logprobs = prepared.params.logprobs is not None
        parser = ToolStreamParser(prepared.tools) if prepared.tools is not None else None
        held: list[TokenLogprobs] = []  # log-probabilities of text the tool-call parser has not released yet
        async with contextlib.aclosing(self.generation.run(prepared)) as run:
            async for step in run:
                if started is not None:
                    started.set()
                text, finish = step.text, step.finish
                held += step.logprobs if wants_logprobs else []
                if parser is None:
                    yield Delta(DeltaMessage(content=text) if text else DeltaMessage(), finish, held, step)
                    held = []
                    continue
                content, calls = parser.feed(text)
                if finish:
                    tail, calls = parser.finish()
                    content += tail
                    finish = "tool_calls" if calls and finish == "stop" else finish
                if content or calls or finish:
                    yield Delta(DeltaMessage(content=content or None, tool_calls=calls or None), finish, held, step)
                    held = []

    async def _all_deltas(self, prepared: PreparedChat) -> AsyncIterator[tuple[int, Delta]]:
        """Every choice's deltas as they come, by choice index: the leader's at once, the followers' once the
        leader's prompt is cached (module docstring)."""
        runs = prepared.choices()
        index = {id(run): number for number, run in enumerate(runs)}
        async with contextlib.aclosing(leader_first_streams([runs], self._deltas)) as deltas:
            async for run, delta in deltas:
                yield index[id(run)], delta

    async def stream(
        self, prepared: PreparedChat, include_usage: bool, *, continuous_usage: bool = False
    ) -> AsyncIterator[bytes]:
        """SSE chunks: a role chunk per choice, content chunks, each choice's finish chunk, then usage (if asked) and
        [DONE].

        With `continuous_usage` (vLLM's `continuous_usage_stats`) every chunk also carries the usage so far (the
        prompt once, the tokens every choice generated).

        An engine failure mid-stream becomes an in-band error event; the stream still ends with [DONE].
        """
        rid, model = prepared.request_id, self.engine.model_name
        created = int(time.time())
        generated: dict[int, int] = {}
        cached = 0

        def usage() -> Usage:
            return self._usage(prepared, sum(generated.values()), cached)

        def chunk(
            index: int, delta: DeltaMessage, finish: str | None = None, entries: list[TokenLogprobs] | None = None
        ) -> bytes:
            logprobs = ChoiceLogprobs(content=self.logprob_entries(entries or [])) if entries else None
            return sse_data(
                ChatCompletionChunk(
                    id=rid,
                    created=created,
                    model=model,
                    choices=[ChunkChoice(index=index, delta=delta, finish_reason=finish, logprobs=logprobs)],
                    usage=usage() if continuous_usage else None,
                )
            )

        for index in range(prepared.n):
            yield chunk(index, DeltaMessage(role="assistant", content=""))
        try:
            async with contextlib.aclosing(self._all_deltas(prepared)) as deltas:
                async for index, delta in deltas:
                    generated[index] = delta.step.generated
                    if index == 0:
                        cached = delta.step.cached
                    yield chunk(index, delta.message, delta.finish, delta.entries)
        except EngineError as exc:
            yield sse_error(UpstreamError(f"generation failed: {exc}"))
            yield DONE
            return
        if include_usage:
            yield sse_data(ChatCompletionChunk(id=rid, created=created, model=model, choices=[], usage=usage()))
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

"""What the worker's endpoints share: a request's sampling as the engine takes it, one generation run (the engine's
tokens to text with stop strings held back, log-probabilities alongside, latency metrics recorded), and the choices of
one prompt collected leader first (`n` > 1: the followers copy the leader's cached prompt)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpu_workers.engine import Engine, SamplingParams, TokenLogprobs
from gpu_workers.server.metrics import WorkerMetrics
from gpu_workers.server.text_output import TextAssembler
from shared.errors import ContextLengthExceededError, InvalidRequestError
from shared.wire.sampling_api import SamplingControls
from shared.wire.schemas import PromptTokensDetails, Usage


@dataclass
class PreparedRequest:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    stop: list[str]


@dataclass
class RunStep:
    """What one step of a generation run hands out."""

    text: str  # the text delta that may be sent now
    finish: str | None
    generated: int  # tokens generated so far
    cached: int  # prompt tokens served from the prefix cache
    logprobs: list[TokenLogprobs] = field(default_factory=list)  # of the tokens since the last step
    prompt_logprobs: list[TokenLogprobs | None] | None = None  # with the first step, when asked for


@dataclass
class ChoiceResult:
    """One choice's whole answer: its text, how it ended, its tokens' log-probability entries (a completion's echoed
    prompt first, None where nothing predicts a token), its counts."""

    text: str = ""
    finish: str | None = None
    generated: int = 0
    cached: int = 0
    entries: list[TokenLogprobs | None] = field(default_factory=list)


class Generation:
    def __init__(self, engine: Engine, metrics: WorkerMetrics) -> None:
        self.engine = engine
        self.metrics = metrics

    def token(self, token_id: int, logprob: float) -> dict[str, Any]:
        """A token as log-probability entries show it: its text, its log-probability and its own bytes."""
        raw = self.engine.token_bytes(token_id)
        # A token that holds part of a UTF-8 character reads as U+FFFD, as in vLLM; its bytes are exact.
        return {"token": raw.decode("utf-8", errors="replace"), "logprob": max(logprob, -9999.0), "bytes": list(raw)}

    async def run(self, prepared: PreparedRequest) -> AsyncIterator[RunStep]:
        """The run's steps: a step whenever text may be sent, or the answer finished; latency metrics recorded."""
        labels = {"model_name": self.engine.model_name}
        assembler = TextAssembler(self.engine.decode, prepared.stop)
        start = last = time.perf_counter()
        generated = cached = 0
        finish: str | None = None
        pending: list[TokenLogprobs] = []  # entries of tokens whose text is held back (a stop string may follow)
        prompt_logprobs: list[TokenLogprobs | None] | None = None
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
                prompt_logprobs = prompt_logprobs or out.prompt_logprobs
                if assembler.stopped:
                    finish = "stop"
                elif out.finished:
                    text += assembler.flush()
                    finish = out.finish_reason
                if text or finish:
                    yield RunStep(text, finish, generated, cached, pending, prompt_logprobs)
                    pending, prompt_logprobs = [], None
                if finish:
                    return
        finally:
            await stream.aclose()  # aborts the engine request (frees its KV blocks) if it is still running
            self.metrics.prompt_tokens.labels(**labels).inc(len(prepared.prompt_ids))
            self.metrics.generation_tokens.labels(**labels).inc(generated)
            self.metrics.e2e.labels(**labels).observe(time.perf_counter() - start)
            self.metrics.request_success.labels(finished_reason=finish or "abort", **labels).inc()


_Run = TypeVar("_Run")


async def leader_first(
    runs: list[_Run], collect: Callable[[_Run, asyncio.Event | None], Awaitable[ChoiceResult]]
) -> list[ChoiceResult]:
    """Every run of one prompt collected: the first (the leader) alone until its first step (`collect` sets the event
    then), so its prompt's KV blocks are in the prefix cache, then the others (the followers), which copy them. A
    leader that fails before its first step fails the request with no follower started; the first failure fails it,
    and whatever ends it (a failure, the client gone) closes every run."""
    if len(runs) == 1:
        return [await collect(runs[0], None)]
    started = asyncio.Event()
    leader = asyncio.create_task(collect(runs[0], started))
    waiting = asyncio.create_task(started.wait())
    tasks = [leader, waiting]
    try:
        await asyncio.wait({leader, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if leader.done():
            leader.result()
        followers = [asyncio.create_task(collect(run, None)) for run in runs[1:]]
        tasks += followers
        return list(await asyncio.gather(leader, *followers))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


_Item = TypeVar("_Item")


async def leader_first_streams(
    groups: list[list[_Run]], stream: Callable[[_Run, asyncio.Event | None], AsyncIterator[_Item]]
) -> AsyncIterator[tuple[_Run, _Item]]:
    """Every run's items as they come, each with its run: a group's first run (its leader) at once, the group's others
    once the leader's prompt is cached (`stream` sets the event at the leader's first step; a leader that ends without
    one still lets them go). The first failure is raised to the reader; however the reading ends, every run is
    closed. A lone run is read directly (no queue on the one-choice path)."""
    if len(groups) == 1 and len(groups[0]) == 1:
        (only,) = groups[0]
        async with contextlib.aclosing(stream(only, None)) as items:
            async for item in items:
                yield only, item
        return
    queue: asyncio.Queue[tuple[_Run, _Item | BaseException | None]] = asyncio.Queue()
    tasks: list[asyncio.Task[None]] = []

    async def pump(run: _Run, started: asyncio.Event | None) -> None:
        try:
            async with contextlib.aclosing(stream(run, started)) as items:
                async for item in items:
                    await queue.put((run, item))
        except Exception as exc:  # handed to the reader, which raises it there
            await queue.put((run, exc))
            return
        finally:
            if started is not None:
                started.set()
        await queue.put((run, None))

    async def group(runs: list[_Run]) -> None:
        started = asyncio.Event()
        tasks.append(asyncio.create_task(pump(runs[0], started)))
        if len(runs) > 1:
            await started.wait()
            tasks.extend(asyncio.create_task(pump(run, None)) for run in runs[1:])

    starters = [asyncio.create_task(group(runs)) for runs in groups]
    try:
        ended, total = 0, sum(len(runs) for runs in groups)
        while ended < total:
            run, item = await queue.get()
            if item is None:
                ended += 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield run, item
    finally:
        for task in [*starters, *tasks]:
            task.cancel()
        await asyncio.gather(*starters, *tasks, return_exceptions=True)


def too_long(limit: int, prompt: int, wanted: int, *, what: str, param: str) -> ContextLengthExceededError:
    """OpenAI's 400 for a prompt (`what`: "messages" or "prompt") whose tokens and completion budget exceed the
    context."""
    return ContextLengthExceededError(
        f"This model's maximum context length is {limit} tokens. However, you requested {prompt + wanted} tokens "
        f"({prompt} in the {what}, {wanted} in the completion). Please reduce the length of the {what} or completion.",
        param=param,
    )


def usage_of(prompt: int, generated: int, cached: int) -> Usage:
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=generated,
        total_tokens=prompt + generated,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
    )


def sampling_params(
    request: SamplingControls,
    engine: Engine,
    *,
    max_tokens: int,
    temperature: float | None,
    top_p: float | None,
    seed: int | None,
    json_schema: dict[str, Any] | None = None,
    logprobs: int | None = None,
    prompt_logprobs: int | None = None,
) -> SamplingParams:
    """The request's sampling as the engine takes it; a 400 for a parameter this engine cannot honour or a token id
    outside its vocabulary."""
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if temperature is None else temperature,
        top_p=1.0 if top_p is None else top_p,
        seed=seed,
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
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
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

"""Completions serving logic of the worker (`POST /v1/completions`, as vLLM serves it): prompts as text or token ids,
`n` choices per prompt (choice `p * n + i` is prompt `p`'s `i`-th, as in vLLM), `echo` with the prompt's own
log-probabilities, OpenAI's legacy `logprobs` shape, streamed or whole.

`n` > 1 shares each prompt's KV as chat does (gpu_workers/server/chat_serving.py): a prompt's first choice (the
leader) runs alone until its first step, then its other choices (the followers) start and copy the prompt's cached
blocks; a seed `s` gives choice `i` of a prompt the seed `s + i`."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

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
from shared.errors import InvalidRequestError, ModelNotFoundError, UpstreamError
from shared.wire.completions_api import Completion, CompletionChoice, CompletionLogprobs, CompletionRequest
from shared.wire.schemas import Usage
from shared.wire.sse import DONE, sse_data, sse_error


@dataclass
class PreparedPrompt(PreparedRequest):
    index: int = 0  # the choice's index: prompt * n + its number among the prompt's choices
    echo: str = ""  # the prompt's text, when echoed
    score_only: bool = False  # max_tokens 0: the prompt is scored, the one token generated for it is dropped
    group: int = 0  # which prompt it answers
    leader: bool = True  # the prompt's first choice: runs first, the others follow once its prompt is cached


def _groups(prompts: list[PreparedPrompt]) -> list[list[PreparedPrompt]]:
    """The choices by prompt, each prompt's leader first."""
    groups: dict[int, list[PreparedPrompt]] = {}
    for prompt in prompts:
        groups.setdefault(prompt.group, []).append(prompt)
    return list(groups.values())


class CompletionServing:
    def __init__(self, engine: Engine, metrics: WorkerMetrics) -> None:
        self.engine = engine
        self.generation = Generation(engine, metrics)

    def prepare(self, request: CompletionRequest) -> list[PreparedPrompt]:
        """Every prompt ready for the engine; anything that can fail with a 4xx fails here, before any token."""
        if request.model != self.engine.model_name:
            raise ModelNotFoundError(f"The model `{request.model}` does not exist.", param="model")
        limit = self.engine.max_model_len
        score_only = request.max_tokens == 0
        prepared = []
        for index, prompt in enumerate(request.prompts()):
            ids = self.engine.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
            if not ids:
                raise InvalidRequestError("prompt must not be empty", param="prompt")
            outside = [t for t in ids if t >= self.engine.vocab_size]
            if outside:
                raise InvalidRequestError(f"token id {outside[0]} in prompt is out of vocabulary", param="prompt")
            wanted = 1 if score_only else request.max_tokens
            if len(ids) + (wanted or 1) > limit:
                raise too_long(limit, len(ids), wanted or 0, what="prompt", param="prompt")
            params = sampling_params(
                request,
                self.engine,
                max_tokens=wanted if wanted is not None else limit - len(ids),
                temperature=request.temperature,
                top_p=request.top_p,
                seed=request.seed,
                logprobs=request.logprobs,
                prompt_logprobs=request.logprobs if request.echo and request.logprobs is not None else None,
            )
            echo = (prompt if isinstance(prompt, str) else self.engine.decode(ids)) if request.echo else ""
            rid = f"cmpl-{uuid.uuid4().hex}"
            for choice in range(request.n):
                seed = None if params.seed is None else params.seed + choice
                prepared.append(
                    PreparedPrompt(
                        rid if choice == 0 else f"{rid}-{choice}", ids, params.model_copy(update={"seed": seed}),
                        request.stop_sequences(), index * request.n + choice, echo, score_only, group=index,
                        leader=choice == 0,
                    )
                )  # fmt: skip
        return prepared

    async def complete(self, prompts: list[PreparedPrompt], want_logprobs: bool) -> Completion:
        """Every choice of every prompt, generated side by side (one batch in the engine), as one completion."""
        try:
            answered = await asyncio.gather(*(self._collect_group(group) for group in _groups(prompts)))
        except EngineError as exc:
            raise UpstreamError(f"generation failed: {exc}") from exc
        by_index = {p.index: r for group, results in zip(_groups(prompts), answered, strict=True)
                    for p, r in zip(group, results, strict=True)}  # fmt: skip
        results = [by_index[p.index] for p in prompts]
        choices = [
            CompletionChoice(
                index=p.index,
                text=p.echo + r.text,
                logprobs=self._logprobs(p, r.entries) if want_logprobs else None,
                finish_reason=r.finish,  # type: ignore[arg-type]
            )
            for p, r in zip(prompts, results, strict=True)
        ]
        leaders = [(p, r) for p, r in zip(prompts, results, strict=True) if p.leader]
        prompt_tokens = sum(len(p.prompt_ids) for p, _ in leaders)  # each prompt counts once, as in vLLM
        return Completion(
            id=prompts[0].request_id,
            model=self.engine.model_name,
            choices=choices,
            usage=usage_of(prompt_tokens, sum(r.generated for r in results), sum(r.cached for _, r in leaders)),
        )

    async def _collect_group(self, runs: list[PreparedPrompt]) -> list[ChoiceResult]:
        """A prompt's choices: the leader first, the followers once its prompt is cached (module docstring)."""
        return await leader_first(runs, self._collect)

    async def _collect(self, prompt: PreparedPrompt, started: asyncio.Event | None = None) -> ChoiceResult:
        result = ChoiceResult()
        async with contextlib.aclosing(self.generation.run(prompt)) as run:
            async for step in run:
                if started is not None:
                    started.set()
                if step.prompt_logprobs is not None:
                    result.entries = [*step.prompt_logprobs, *result.entries]
                if prompt.score_only:  # the prompt's scores were all that was asked for
                    result.finish, result.cached = "length", step.cached
                    return result
                result.text += step.text
                result.entries += step.logprobs
                result.finish, result.generated, result.cached = step.finish, step.generated, step.cached
        return result

    async def stream(
        self, prompts: list[PreparedPrompt], include_usage: bool, *, want_logprobs: bool, continuous_usage: bool = False
    ) -> AsyncIterator[bytes]:
        """SSE chunks of every choice's answer as it comes (each choice's echoed prompt first), usage (if asked), then
        [DONE]; an engine failure mid-stream is an in-band error event."""
        created = int(time.time())
        rid = prompts[0].request_id
        generated: dict[int, int] = {}
        cached: dict[int, int] = {}
        sent: dict[int, str] = {}
        prompt_tokens = sum(len(p.prompt_ids) for p in prompts if p.leader)  # each prompt counts once

        def usage() -> Usage:
            return usage_of(prompt_tokens, sum(generated.values()), sum(cached.values()))

        def chunk(prompt: PreparedPrompt, text: str, entries: list[TokenLogprobs | None], finish: str | None) -> bytes:
            offset = len(sent.get(prompt.index, ""))
            logprobs = self._logprobs(prompt, entries, offset=offset) if want_logprobs else None
            choice = CompletionChoice(index=prompt.index, text=text, logprobs=logprobs, finish_reason=finish)  # type: ignore[arg-type]
            body = Completion(
                id=rid, created=created, model=self.engine.model_name, choices=[choice],
                usage=usage() if continuous_usage else None,
            )  # fmt: skip
            return sse_data(body)

        try:
            async with contextlib.aclosing(self._all_steps(prompts)) as steps:
                async for prompt, step in steps:
                    head, entries = self._head(prompt, step)
                    generated[prompt.index] = 0 if prompt.score_only else step.generated
                    if prompt.leader:
                        cached[prompt.index] = step.cached
                    text = head + ("" if prompt.score_only else step.text)
                    finish = "length" if prompt.score_only else step.finish
                    yield chunk(prompt, text, [*entries, *([] if prompt.score_only else step.logprobs)], finish)
                    sent[prompt.index] = sent.get(prompt.index, "") + text
        except EngineError as exc:
            yield sse_error(UpstreamError(f"generation failed: {exc}"))
            yield DONE
            return
        if include_usage:
            yield sse_data(Completion(id=rid, created=created, model=self.engine.model_name, choices=[], usage=usage()))
        yield DONE

    def _all_steps(self, prompts: list[PreparedPrompt]) -> AsyncIterator[tuple[PreparedPrompt, RunStep]]:
        """Every choice's steps as they come: each prompt's leader at once, its followers once the leader's prompt is
        cached (module docstring)."""
        return leader_first_streams(_groups(prompts), self._steps)

    async def _steps(self, prompt: PreparedPrompt, started: asyncio.Event | None) -> AsyncIterator[RunStep]:
        """One choice's steps (`started` set at its first); a score-only choice ends at its first step."""
        async with contextlib.aclosing(self.generation.run(prompt)) as run:
            async for step in run:
                if started is not None:
                    started.set()
                yield step
                if prompt.score_only:
                    return

    @staticmethod
    def _head(prompt: PreparedPrompt, step: RunStep) -> tuple[str, list[TokenLogprobs | None]]:
        """The echoed prompt and its entries: handed out once, with the first step."""
        echoed, prompt.echo = prompt.echo, ""
        return echoed, list(step.prompt_logprobs or [])

    def _logprobs(
        self, prompt: PreparedPrompt, entries: list[TokenLogprobs | None], offset: int = 0
    ) -> CompletionLogprobs:
        """OpenAI's legacy shape. A prompt's first token has no log-probability (nothing predicts it): its entry is
        null, as in OpenAI's and vLLM's `echo`. Each top dictionary holds the likeliest tokens and the chosen one."""
        out = CompletionLogprobs()
        ids = prompt.prompt_ids
        for position, entry in enumerate(entries):
            token_id = entry.token_id if entry is not None else ids[0] if position == 0 else ids[position]
            token = self.generation.token(token_id, 0.0)["token"]
            out.tokens.append(token)
            out.text_offset.append(offset)
            offset += len(token)
            if entry is None:
                out.token_logprobs.append(None)
                out.top_logprobs.append(None)
                continue
            out.token_logprobs.append(max(entry.logprob, -9999.0))
            top = {self.generation.token(t, lp)["token"]: max(lp, -9999.0) for t, lp in entry.top}
            top.setdefault(token, max(entry.logprob, -9999.0))
            out.top_logprobs.append(top)
        return out

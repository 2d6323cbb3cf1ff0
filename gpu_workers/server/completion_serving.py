"""Completions serving logic of the worker (`POST /v1/completions`, as vLLM serves it): prompts as text or token ids,
one choice per prompt, `echo` with the prompt's own log-probabilities, OpenAI's legacy `logprobs` shape."""

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
    sampling_params,
    too_long,
    usage_of,
)
from gpu_workers.server.metrics import WorkerMetrics
from shared.errors import InvalidRequestError, ModelNotFoundError, UpstreamError
from shared.wire.completions_api import Completion, CompletionChoice, CompletionLogprobs, CompletionRequest
from shared.wire.sse import DONE, sse_data, sse_error


@dataclass
class PreparedPrompt(PreparedRequest):
    index: int = 0
    echo: str = ""  # the prompt's text, when echoed
    score_only: bool = False  # max_tokens 0: the prompt is scored, the one token generated for it is dropped


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
            prepared.append(PreparedPrompt(rid, ids, params, request.stop_sequences(), index, echo, score_only))
        return prepared

    async def complete(self, prompts: list[PreparedPrompt], want_logprobs: bool) -> Completion:
        """Every prompt's answer, generated side by side (one batch in the engine), as one completion."""
        try:
            results = await asyncio.gather(*(self._collect(p) for p in prompts))
        except EngineError as exc:
            raise UpstreamError(f"generation failed: {exc}") from exc
        choices = [
            CompletionChoice(
                index=p.index,
                text=p.echo + r.text,
                logprobs=self._logprobs(p, r.entries) if want_logprobs else None,
                finish_reason=r.finish,  # type: ignore[arg-type]
            )
            for p, r in zip(prompts, results, strict=True)
        ]
        prompt_tokens = sum(len(p.prompt_ids) for p in prompts)
        return Completion(
            id=prompts[0].request_id,
            model=self.engine.model_name,
            choices=choices,
            usage=usage_of(prompt_tokens, sum(r.generated for r in results), sum(r.cached for r in results)),
        )

    async def _collect(self, prompt: PreparedPrompt) -> ChoiceResult:
        result = ChoiceResult()
        async with contextlib.aclosing(self.generation.run(prompt)) as run:
            async for step in run:
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
        self, prompt: PreparedPrompt, include_usage: bool, *, want_logprobs: bool, continuous_usage: bool = False
    ) -> AsyncIterator[bytes]:
        """SSE chunks of one prompt's answer (the echoed prompt first), usage (if asked), then [DONE]; an engine
        failure mid-stream is an in-band error event."""
        created = int(time.time())
        generated = cached = 0

        def chunk(text: str, entries: list[TokenLogprobs | None], finish: str | None = None) -> bytes:
            logprobs = self._logprobs(prompt, entries, offset=len(sent)) if want_logprobs else None
            body = Completion(
                id=prompt.request_id,
                created=created,
                model=self.engine.model_name,
                choices=[CompletionChoice(index=0, text=text, logprobs=logprobs, finish_reason=finish)],  # type: ignore[arg-type]
                usage=usage_of(len(prompt.prompt_ids), generated, cached) if continuous_usage else None,
            )
            return sse_data(body)

        sent = ""
        try:
            async with contextlib.aclosing(self.generation.run(prompt)) as run:
                async for step in run:
                    head, entries = self._head(prompt, step)
                    generated, cached = (0 if prompt.score_only else step.generated), step.cached
                    text = head + ("" if prompt.score_only else step.text)
                    finish = "length" if prompt.score_only else step.finish
                    yield chunk(text, [*entries, *([] if prompt.score_only else step.logprobs)], finish)
                    sent += text
                    if prompt.score_only:
                        break
        except EngineError as exc:
            yield sse_error(UpstreamError(f"generation failed: {exc}"))
            yield DONE
            return
        if include_usage:
            usage = usage_of(len(prompt.prompt_ids), generated, cached)
            yield sse_data(
                Completion(id=prompt.request_id, created=created, model=self.engine.model_name, choices=[], usage=usage)
            )
        yield DONE

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

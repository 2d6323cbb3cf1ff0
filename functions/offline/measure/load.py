"""Drive concurrent streaming chat completions with the openai async client and time every chunk."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx
import openai
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from functions.offline.measure.stats import RequestResult

MAX_ERROR_CHARS = 300


def api_base(url: str) -> str:
    """The OpenAI SDK's base_url for a service root (accepts a URL that already ends in /v1)."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else f"{url}/v1"


def make_client(url: str, api_key: str | None, timeout_s: float) -> AsyncOpenAI:
    """An AsyncOpenAI client without retries (a retry would hide an error and skew the timings)."""
    return AsyncOpenAI(
        base_url=api_base(url),
        api_key=api_key or "not-needed",  # the worker takes no key, but the SDK insists on one
        max_retries=0,
        # The SDK's own Timeout class: openai 3 runs on httpx2 and refuses an httpx.Timeout.
        timeout=openai.Timeout(timeout_s, connect=10.0),
        # The phases measure the model path: an earlier run's answer must not come from the gateway's result cache
        # (docs/result-cache.md; its own phase measures the cache).
        default_headers={"cache-control": "no-cache"},
    )


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, openai.APIStatusError):
        text = f"HTTP {exc.status_code}: {exc.message}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return text[:MAX_ERROR_CHARS]


async def stream_chat(
    client: AsyncOpenAI,
    model: str,
    messages: list[ChatCompletionMessageParam],
    max_tokens: int,
    temperature: float = 0.0,
    headers: dict[str, str] | None = None,
) -> RequestResult:
    """One streaming request with usage: TTFT to the first content chunk, gaps between content chunks, usage."""
    result = RequestResult()
    start = time.perf_counter()
    last: float | None = None
    try:
        stream = await client.chat.completions.create(
            model=model,
            messages=messages,
            max_tokens=max_tokens,
            temperature=temperature,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=headers,
        )
        async for chunk in stream:
            now = time.perf_counter()
            if chunk.usage is not None:
                result.output_tokens = chunk.usage.completion_tokens
                result.prompt_tokens = chunk.usage.prompt_tokens
                details = chunk.usage.prompt_tokens_details
                result.cached_tokens = details.cached_tokens if details is not None else None
            for choice in chunk.choices:
                if choice.delta is not None and choice.delta.content:
                    if last is None:
                        result.ttft_s = now - start
                    else:
                        result.itl_s.append(now - last)
                    last = now
                    result.content_chunks += 1
                if choice.finish_reason is not None:
                    result.finish_reason = choice.finish_reason
        result.total_s = time.perf_counter() - start
        if result.output_tokens == 0 and result.content_chunks:
            result.output_tokens = result.content_chunks  # no usage chunk: one chunk is about one token
        if result.content_chunks == 0 and result.finish_reason is None:
            result.error = "stream ended without content or finish_reason"
    except (openai.OpenAIError, httpx.HTTPError) as exc:
        result.error = describe_error(exc)
        result.total_s = time.perf_counter() - start
    return result


@dataclass
class LevelRun:
    """A batch's per-request records and the wall time from the first request sent to the last one finished."""

    results: list[RequestResult]
    wall_s: float


async def run_level(
    client: AsyncOpenAI,
    model: str,
    prompts: Sequence[list[ChatCompletionMessageParam]],
    concurrency: int,
    max_tokens: int,
    temperature: float = 0.0,
    headers: dict[str, str] | None = None,
    on_done: Callable[[RequestResult], None] | None = None,
) -> LevelRun:
    """Send every prompt, at most `concurrency` in flight (a closed loop: a new request starts as one finishes)."""
    gate = asyncio.Semaphore(concurrency)

    async def one(messages: list[ChatCompletionMessageParam]) -> RequestResult:
        async with gate:
            result = await stream_chat(client, model, messages, max_tokens, temperature, headers)
        if on_done is not None:
            on_done(result)
        return result

    start = time.perf_counter()
    results = await asyncio.gather(*(one(p) for p in prompts))
    return LevelRun(results=list(results), wall_s=time.perf_counter() - start)


async def timed_get(client: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None) -> float | None:
    """Seconds for one GET that answers 200, or None on any failure."""
    start = time.perf_counter()
    try:
        response = await client.get(url, headers=headers)
    except httpx.HTTPError:
        return None
    return time.perf_counter() - start if response.status_code == 200 else None

"""Benchmark phase: the prompt/result cache's hit latency against a miss, through the gateway with its real workers.

Each pair sends a fresh deterministic request (temperature 0, a nonce no earlier run used: a miss the model answers)
and then the same request again (a hit the gateway answers from its cache), one at a time so nothing queues; both
non-streamed (whole response) and streamed (time to the first content chunk). The response header says which it was;
a pair whose second request was not a hit is counted, not measured."""

from __future__ import annotations

import json
import secrets
import time
from typing import Protocol

import httpx
from rich.progress import Progress

from functions.chat.result_cache.cache import CACHE_HEADER
from functions.offline.bench import prompts
from functions.offline.bench.results.result_cache_results import CacheSide, ResultCacheStats
from functions.offline.measure import stats


def _question(nonce: str, mode: str, index: int) -> list[dict[str, str]]:
    """A run-unique travel question. Not the generation prompts: tagged, those trip the embedded classifier's false
    positives (400) often enough to spoil a pair; these pass it."""
    question = prompts.QUESTIONS[index % len(prompts.QUESTIONS)]
    return [{"role": "user", "content": f"Question {nonce}{mode[0]}{index}: {question}"}]


async def _timed(
    http: httpx.AsyncClient, url: str, headers: dict[str, str], body: dict[str, object]
) -> tuple[float, str | None]:
    """(ms to the whole response, or to the first content chunk of a stream; the cache header)."""
    start = time.perf_counter()
    if not body.get("stream"):
        response = await http.post(url, json=body, headers=headers)
        response.raise_for_status()
        return (time.perf_counter() - start) * 1000, response.headers.get(CACHE_HEADER)
    async with http.stream("POST", url, json=body, headers=headers) as response:
        if response.is_error:
            await response.aread()  # the error body, for the report
        response.raise_for_status()
        first: float | None = None
        async for line in response.aiter_lines():
            if first is None and line.startswith("data: {"):
                chunk = json.loads(line.removeprefix("data: "))
                if any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or []):
                    first = (time.perf_counter() - start) * 1000
        if first is None:
            raise RuntimeError("stream ended without content")
        return first, response.headers.get(CACHE_HEADER)


class _Targets(Protocol):
    url: str
    api_key: str | None


class _Config(Protocol):
    model: str
    quick: bool


async def result_cache_phase(
    targets: _Targets, cfg: _Config, max_tokens: int, progress: Progress, notes: list[str]
) -> ResultCacheStats | None:
    """The phase as `make bench` runs it (3 pairs per mode quick, else 8); a failure is a note, never the run's end."""
    try:
        pairs = 3 if cfg.quick else 8
        return await measure_result_cache(targets.url, targets.api_key, cfg.model, max_tokens, pairs, progress)
    except Exception as exc:  # keep what the other phases measured
        notes.append(f"result cache phase failed: {type(exc).__name__}: {exc}")
        return None


async def measure_result_cache(
    base_url: str, api_key: str | None, model: str, max_tokens: int, pairs: int, progress: Progress
) -> ResultCacheStats:
    url = f"{base_url.rstrip('/')}/v1/chat/completions"
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    nonce = secrets.token_hex(4)
    task = progress.add_task(f"result cache: miss vs hit x{pairs}", total=4 * pairs)
    times: dict[tuple[str, str], list[float]] = {}
    not_hits, errors = 0, []
    async with httpx.AsyncClient(timeout=300.0) as http:
        for i in range(pairs):
            for mode in ("whole", "stream"):
                messages = _question(nonce, mode, i)
                body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0}
                body["stream"] = mode == "stream"
                try:
                    miss_ms, _ = await _timed(http, url, headers, body)
                    progress.advance(task)
                    hit_ms, outcome = await _timed(http, url, headers, body)
                    progress.advance(task)
                except httpx.HTTPStatusError as exc:
                    errors.append(f"HTTP {exc.response.status_code}: {exc.response.text[:300]}")
                    continue
                except (httpx.HTTPError, RuntimeError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                if outcome != "hit":
                    not_hits += 1
                    continue
                times.setdefault((mode, "miss"), []).append(round(miss_ms, 2))
                times.setdefault((mode, "hit"), []).append(round(hit_ms, 2))
    sides = []
    for mode in ("whole", "stream"):
        miss, hit = times.get((mode, "miss"), []), times.get((mode, "hit"), [])
        miss_p50, hit_p50 = stats.median(miss), stats.median(hit)
        sides.append(CacheSide(mode=mode, miss_p50_ms=miss_p50, hit_p50_ms=hit_p50,
                               hit_over_miss=stats.ratio(hit_p50, miss_p50), miss_ms=miss, hit_ms=hit))  # fmt: skip
    return ResultCacheStats(
        model=model, max_tokens=max_tokens, pairs=pairs, not_hits=not_hits, sides=sides, errors=errors[:5]
    )

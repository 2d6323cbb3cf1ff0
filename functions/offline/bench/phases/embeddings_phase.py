"""Benchmark phase: `/v1/embeddings` throughput through the gateway, in inputs per second, with requests of one input
and of 32 inputs (and the ratio), plus one-input requests sent one at a time: the gap between that and the concurrent
one-input level is what the worker's micro-batcher gains by gathering concurrent requests into one forward pass."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
from rich.progress import Progress

from functions.offline.bench.results.embeddings_results import EmbeddingLevel, EmbeddingStats
from functions.offline.evals.tenants import ensure_eval_keys
from functions.offline.measure import stats
from shared.fleet.tiers import Tier

MODEL = "text-embedding-minilm"
WORDS = (
    "river", "market", "engine", "quiet", "orange", "ledger", "window", "garden", "signal", "copper", "harbour",
    "lantern", "violet", "canyon", "ribbon", "meadow", "cobalt", "throttle", "pocket", "summit", "velvet", "anchor",
    "mirror", "thistle", "beacon", "saddle", "prism", "walnut", "ember", "cinder",
)  # fmt: skip


def sentence(i: int) -> str:
    """A deterministic sentence of 12-27 words (about 15-35 tokens), different for every i."""
    length = 12 + (i * 7) % 16
    return " ".join(WORDS[(i * 13 + k * (i % 5 + 1)) % len(WORDS)] for k in range(length)) + f" #{i}"


async def _level(
    client: httpx.AsyncClient, label: str, batch: int, concurrency: int, requests: int, progress: Progress
) -> EmbeddingLevel:
    task = progress.add_task(f"embeddings: {label}", total=requests)
    pending = iter(range(requests))
    latencies: list[float] = []
    errors: list[str] = []

    async def one_stream() -> None:
        for i in pending:
            body = {
                "model": MODEL,
                "input": [sentence(i * batch + j) for j in range(batch)],
                "encoding_format": "base64",
            }
            started = time.perf_counter()
            try:
                response = await client.post("/v1/embeddings", json=body)
                if response.status_code != 200 or len(response.json()["data"]) != batch:
                    errors.append(f"{response.status_code}: {response.text[:200]}")
                else:
                    latencies.append(time.perf_counter() - started)
            except httpx.HTTPError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            progress.advance(task)

    started = time.perf_counter()
    await asyncio.gather(*(one_stream() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    return EmbeddingLevel(
        label=label,
        batch=batch,
        concurrency=concurrency,
        requests=requests,
        errors=len(errors),
        error_samples=errors[:3],
        wall_s=round(wall, 3),
        inputs_per_s=round(len(latencies) * batch / wall, 2) if wall > 0 else 0.0,
        latency_p50_ms=stats.to_ms(stats.percentile(latencies, 50)),
        latency_p95_ms=stats.to_ms(stats.percentile(latencies, 95)),
    )


def bench_key(base_url: str, keys_path: Path, admin_key: str | None, fallback: str | None) -> str:
    """An enterprise eval tenant's key (its RPM leaves room for hundreds of one-input requests a minute; eval tenants
    are never billed), else the given key."""
    if admin_key is not None:
        return ensure_eval_keys(base_url, keys_path, admin_key=admin_key, tiers=(Tier.ENTERPRISE,))[Tier.ENTERPRISE]
    if fallback is None:
        raise RuntimeError("no API key for the embeddings phase (neither an admin key nor the local key)")
    return fallback


async def embeddings_phase(
    base_url: str,
    progress: Progress,
    *,
    keys_path: Path,
    admin_key: str | None,
    api_key: str | None,
    quick: bool = False,
    concurrency: int = 8,
    inputs: int | None = None,  # inputs per concurrent level (default: 256, 128 when quick)
) -> EmbeddingStats:
    """Warm up, then: 1-input requests one at a time, 1-input requests at `concurrency`, 32-input requests at
    `concurrency` (about the same number of inputs in the last two)."""
    api_key = await asyncio.to_thread(bench_key, base_url, keys_path, admin_key, api_key)
    inputs = inputs or (128 if quick else 256)
    headers = {"authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=120.0) as client:
        warm = await client.post("/v1/embeddings", json={"model": MODEL, "input": [sentence(i) for i in range(32)]})
        if warm.status_code != 200:
            raise RuntimeError(f"the embeddings warm-up failed: {warm.status_code} {warm.text[:200]}")
        sequential = await _level(client, "batch 1, one at a time", 1, 1, inputs // 4, progress)
        single = await _level(client, f"batch 1, {concurrency} concurrent", 1, concurrency, inputs, progress)
        requests = max(inputs // 32, 1)
        batched = await _level(client, f"batch 32, {concurrency} concurrent", 32, concurrency, requests, progress)
    return EmbeddingStats(
        model=MODEL,
        levels=[sequential, single, batched],
        batch32_over_batch1=stats.ratio(batched.inputs_per_s, single.inputs_per_s),
        concurrent_over_sequential=stats.ratio(single.inputs_per_s, sequential.inputs_per_s),
        note=(
            "Through the gateway (auth, admission, ledger per request) to the local embedding worker; inputs of "
            "15-35 tokens, base64 responses. Requests of one input pay the per-request path once per input."
        ),
    )

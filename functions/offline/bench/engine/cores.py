"""Two engines on one host generating at once, as `fleetchat up`'s two pools do: their aggregate decode rate and
stream gaps against one engine alone with the same streams, with the cores shared (the default,
gpu_workers/llama_cpp/core_share.py) and with each engine on every core (`--threads N`, the behaviour before
sharing)."""

from __future__ import annotations

import asyncio
from typing import Any

from functions.offline.bench.engine.rss import running_worker
from functions.offline.bench.prompts import generation_messages
from functions.offline.measure import stats
from functions.offline.measure.load import make_client, stream_chat
from gpu_workers.llama_cpp.core_share import host_cores

REQUEST_TIMEOUT_S = 300.0


def cores_phase(pool: str, *, streams: int = 8, max_tokens: int = 64) -> dict[str, Any]:
    """`streams` sampled streams on one worker, then half of them on each of two workers at once (cores shared),
    then the same on two workers that each run on every core."""
    cores = host_cores()
    result: dict[str, Any] = {"cores": cores, "streams": streams, "max_tokens": max_tokens}
    with running_worker(pool, []) as (_, first):
        result["alone"] = asyncio.run(_drive(pool, [first], streams, max_tokens))
        with running_worker(pool, []) as (_, second):
            result["shared"] = asyncio.run(_drive(pool, [first, second], streams // 2, max_tokens))
    every_core = ["--threads", str(cores)]
    with running_worker(pool, every_core) as (_, first), running_worker(pool, every_core) as (_, second):
        result["every_core_each"] = asyncio.run(_drive(pool, [first, second], streams // 2, max_tokens))
    return result


async def _drive(pool: str, urls: list[str], per_worker: int, max_tokens: int) -> dict[str, Any]:
    """`per_worker` streams on each worker at once (after one warm-up request each): tokens/s of the whole, and the
    gaps between content chunks across every stream."""
    clients = [make_client(url, None, REQUEST_TIMEOUT_S) for url in urls]
    await asyncio.gather(*(stream_chat(c, pool, generation_messages(0, tag="warm"), 2) for c in clients))
    loop = asyncio.get_running_loop()
    start = loop.time()
    runs = [
        stream_chat(client, pool, generation_messages(i, tag=f"w{w}"), max_tokens, temperature=0.8)
        for w, client in enumerate(clients)
        for i in range(per_worker)
    ]
    results = await asyncio.gather(*runs)
    wall = loop.time() - start
    gaps = [gap for r in results for gap in r.itl_s]
    return {
        "tok_s": stats.tokens_per_second(sum(r.output_tokens for r in results if r.ok), wall),
        "itl_p50_ms": stats.to_ms(stats.percentile(gaps, 50)),
        "itl_p95_ms": stats.to_ms(stats.percentile(gaps, 95)),
        "errors": sum(not r.ok for r in results),
    }

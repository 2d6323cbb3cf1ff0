"""The bench's result-cache phase against a real gateway (scripted worker): every second request is a hit, both modes
are measured, the markdown section renders, and the other phases' client never reads the cache."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI
from rich.progress import Progress

from functions.offline.bench import prompts
from functions.offline.bench.phases.result_cache_phase import measure_result_cache
from functions.offline.bench.results.result_cache_results import result_cache_lines
from functions.offline.measure.load import make_client, stream_chat
from tests.integration.conftest import GatewayFactory
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import scripted_worker


def test_the_phase_measures_hits_against_misses(gateway_for: GatewayFactory) -> None:
    worker: FastAPI = scripted_worker("Ribeira, from the bridge, at dusk.")
    with serve(worker) as url:
        gateway = gateway_for({"mini": [url]})
        with Progress(disable=True) as progress:
            stats = asyncio.run(measure_result_cache(gateway.url, gateway.key, "mini", 16, 2, progress))

        async def measured_path() -> list[str | None]:
            client = make_client(gateway.url, gateway.key, 30)
            try:
                messages = prompts.generation_messages(0, "same")
                results = [await stream_chat(client, "mini", messages, 8) for _ in range(2)]
                return [r.error for r in results]
            finally:
                await client.close()

        calls_before = worker.state.calls
        assert asyncio.run(measured_path()) == [None, None]
        assert worker.state.calls == calls_before + 2, "the bench's model-path client was answered from the cache"
    assert (stats.not_hits, stats.errors) == (0, [])
    assert worker.state.calls - 2 == 4  # each pair: one miss upstream, one hit from the cache (2 pairs x 2 modes)
    for side in stats.sides:
        assert len(side.miss_ms) == len(side.hit_ms) == 2
        assert side.hit_over_miss is not None and side.hit_over_miss > 0
    text = "\n".join(result_cache_lines(stats))
    assert "## Result cache: hit vs miss" in text and "| whole response |" in text

"""Benchmark phase: the gateway's CPU time per 1,000 relayed tokens, with and without the learned output check.

Two gateway processes of the phase's own (fresh SQLite data dirs) over the stack's real workers: one as shipped, one
with `FLEETCHAT_SAFETY_OUTPUT_CHECK=false`. Each round sends the same batch of streamed answers through each gateway
in turn (the order alternates between rounds, so a drift in the shared cores' speed falls on both), and reads the
gateway process's CPU time (user + system, from the kernel) before and after. Tokens are the usage the client got.
The gateway's CPU covers everything a streamed request costs it: auth, admission, the pre-filter, relaying, the
post-filter, the ledger and the stored turn; the worker's CPU is its own process and not counted.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import httpx
import psutil
from rich.progress import Progress

from functions.offline.bench import prompts
from functions.offline.bench.phases.phase_gateway import BenchGateway, spawn_gateway, unlimited_tenant, wait_ready
from functions.offline.bench.phases.priority_phase import admitted_prompts
from functions.offline.bench.results.relay_cpu_results import RelayCpuRun, RelayCpuStats
from functions.offline.measure.load import make_client, run_level

VARIANTS = {"output check on": {}, "output check off": {"FLEETCHAT_SAFETY_OUTPUT_CHECK": "false"}}
NO_CACHE = {"cache-control": "no-cache, no-store"}  # every answer generated and relayed, never a result-cache replay
REQUEST_TIMEOUT_S = 300.0


def cpu_seconds(pid: int) -> float:
    """The process's CPU time so far (user + system), children not included."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


async def relay_cpu_phase(
    model: str,
    worker_urls: list[str],
    progress: Progress,
    *,
    streams: int,
    concurrency: int,
    max_tokens: int,
    rounds: int,
) -> tuple[RelayCpuStats, list[str]]:
    """`rounds` x `streams` answers through each variant's gateway; CPU seconds per 1,000 relayed tokens."""
    notes: list[str] = []
    runs = {name: RelayCpuRun(variant=name) for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="fleetchat-bench-relay-cpu-") as tmp:
        gateways: dict[str, tuple[BenchGateway, str]] = {}
        try:
            for i, (name, env) in enumerate(VARIANTS.items()):
                data_dir = Path(tmp) / f"gateway-{i}" / "data"
                data_dir.mkdir(parents=True)
                key = unlimited_tenant(data_dir, model, "bench-relay-cpu")
                gateways[name] = (spawn_gateway(data_dir, model, worker_urls, extra_env=env), key)
            async with httpx.AsyncClient() as http:
                for gateway, _ in gateways.values():
                    await wait_ready(http, gateway)
            task = progress.add_task("relay CPU: output check on / off", total=rounds * len(VARIANTS) * streams)
            for round_no in range(rounds):
                order = list(VARIANTS) if round_no % 2 == 0 else list(reversed(VARIANTS))
                tag = f"relay-cpu-{round_no}"  # one batch for both gateways, each answer generated afresh
                batch = [prompts.generation_messages(i, tag) for i in admitted_prompts(streams, tag)]
                for name in order:
                    gateway, key = gateways[name]
                    client = make_client(gateway.url, key, REQUEST_TIMEOUT_S)
                    try:
                        if round_no == 0:  # the gateway's first requests pay one-off costs (imports, model loads)
                            await run_level(client, model, batch[:2], 2, 8, headers=NO_CACHE)
                        before = cpu_seconds(gateway.proc.pid)
                        level = await run_level(
                            client, model, batch, concurrency, max_tokens, headers=NO_CACHE,
                            on_done=lambda _: progress.advance(task),
                        )  # fmt: skip
                        runs[name].cpu_s += cpu_seconds(gateway.proc.pid) - before
                    finally:
                        await client.close()
                    runs[name].wall_s += level.wall_s
                    runs[name].requests += len(level.results)
                    runs[name].errors += sum(1 for r in level.results if not r.ok)
                    runs[name].first_error = runs[name].first_error or next(
                        (r.error for r in level.results if r.error), None
                    )
                    runs[name].tokens += sum(r.output_tokens for r in level.results if r.ok)
            progress.remove_task(task)
        finally:
            for gateway, _ in gateways.values():
                gateway.stop()
    for run in runs.values():
        if run.errors:
            notes.append(
                f"relay CPU ({run.variant}): {run.errors} of {run.requests} streams failed (first: {run.first_error})"
            )
    stats = RelayCpuStats(
        model=model, concurrency=concurrency, max_tokens=max_tokens, rounds=rounds, runs=list(runs.values())
    )
    return stats, notes

"""Benchmark phase: a plain request's latency through the gateway while its python tool runs a fork bomb and a memory
bomb (issue 53: p50 within 2x of idle).

A gateway subprocess of the phase's own (a fresh SQLite data dir, the shipped sandbox limits). Plain chat completions
go to the real engine (`mini` on the stack's llama.cpp workers, 8 tokens an answer) when `plain_worker_urls` is
given, else to a stand-in that answers at once (then only the gateway is measured: a stand-in, reported as such). The
attacks go to `flagship` served by a stand-in model: when the user's message is `attack:<n>` it calls the python tool
with attack n's code (a model that writes the attack on request; the code is the worker's, so the user's message
carries nothing for the safety pre-filter to read). The attack requests run in a closed loop, a new one as each ends,
while the plain requests are timed one at a time; idle first, then each attack.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from rich.progress import Progress

from functions.offline.bench.phases.phase_gateway import spawn_gateway, unlimited_tenant, wait_ready
from functions.offline.bench.results.sandbox_results import AttackRun, SandboxStats
from functions.offline.measure import stats
from functions.offline.measure.in_thread_server import serve
from functions.sandbox.bubblewrap import BubblewrapRunner

MODEL = "mini"  # the plain requests' pool
ATTACK_MODEL = "flagship"  # the attack requests' pool (the stand-in model)
FORK_BOMB = "import os\nwhile True:\n    os.fork()\n"
MEMORY_BOMB = (  # each child under its own address-space limit; together far past the sandbox's memory
    "import os, time\nfor _ in range(16):\n    if os.fork() == 0:\n"
    "        hoard = [bytearray(10 << 20) for _ in range(40)]\n        time.sleep(30)\ntime.sleep(30)\n"
)
ATTACKS = {"fork bomb": FORK_BOMB, "memory bomb": MEMORY_BOMB}
REQUEST_TIMEOUT_S = 60.0


def _message(content: str | None, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}


def attack_worker() -> FastAPI:
    """The stand-in model: `attack:<n>` calls the python tool with attack n's code, then answers with the tool's
    result; anything else is answered at once."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        user = next(m["content"] for m in messages if m["role"] == "user")
        if messages[-1].get("role") == "tool":
            message = _message(messages[-1]["content"])
        elif isinstance(user, str) and user.startswith("attack:"):
            code = list(ATTACKS.values())[int(user.removeprefix("attack:"))]
            call = {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                    "function": {"name": "python", "arguments": json.dumps({"code": code})}}  # fmt: skip
            message = _message(None, [call])
        else:
            message = _message("Hello.")
        usage = {"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return {"id": f"chatcmpl-{uuid.uuid4().hex[:8]}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", MODEL), "usage": usage,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}]}  # fmt: skip

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


async def _plain(http: httpx.AsyncClient, count: int, progress: Progress, task: Any) -> tuple[list[float], int]:
    seconds, errors = [], 0
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
    for _ in range(count):
        started = time.perf_counter()
        try:
            response = await http.post("/v1/chat/completions", json=body)
            ok = response.status_code == 200
        except httpx.HTTPError:
            ok = False
        if ok:
            seconds.append(time.perf_counter() - started)
        else:
            errors += 1
        progress.advance(task)
    return seconds, errors


async def _attack_loop(http: httpx.AsyncClient, attack: int, stop: asyncio.Event, hits: Counter[str]) -> int:
    body = {"model": ATTACK_MODEL, "messages": [{"role": "user", "content": f"attack:{attack}"}],
            "server_tools": ["python"]}  # fmt: skip
    runs = 0
    while not stop.is_set():
        response = await http.post("/v1/chat/completions", json=body)
        if response.status_code == 200:
            result = json.loads(response.json()["choices"][0]["message"]["content"])
            hits.update(result.get("limits_hit", []))
            if result.get("status") == "timeout":
                hits["timeout"] += 1
            runs += 1
        else:  # a 429 (every place taken) or a failure: counted, and tried again shortly
            code_name = (response.json().get("error") or {}).get("code") if response.content else None
            hits[f"http {response.status_code} {code_name}"] += 1
            await asyncio.sleep(0.2)
    return runs


def _ms(values: list[float], q: float) -> float | None:
    value = stats.percentile(values, q)
    return None if value is None else round(value * 1000, 2)


async def sandbox_phase(
    progress: Progress, *, plain_requests: int, attackers: int, plain_worker_urls: list[str] | None = None
) -> tuple[SandboxStats, list[str]]:
    notes: list[str] = []
    runner = BubblewrapRunner()
    if (reason := runner.unavailable_reason()) is not None:
        raise RuntimeError(f"the sandbox cannot run here: {reason}")
    with tempfile.TemporaryDirectory(prefix="fleetchat-bench-sandbox-") as tmp, serve(attack_worker()) as worker:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir()
        key = unlimited_tenant(data_dir, ATTACK_MODEL, "bench-sandbox")
        tools = {
            "quotas": {"python": {"runs": 1_000_000, "window_s": 3600}},
            "breaker_failure_threshold": 100,
            "sandbox": {"per_tenant": attackers, "per_machine": attackers, "slots_dir": str(Path(tmp) / "slots")},
        }
        pools = {MODEL: plain_worker_urls or [worker], ATTACK_MODEL: [worker]}
        env = {"FLEETCHAT_SERVER_TOOLS": json.dumps(tools), "FLEETCHAT_WORKER_URLS": json.dumps(pools),
               "FLEETCHAT_POOLS": json.dumps(list(pools))}  # fmt: skip
        gateway = spawn_gateway(data_dir, MODEL, pools[MODEL], extra_env=env)
        try:
            headers = {"authorization": f"Bearer {key}"}
            async with httpx.AsyncClient(base_url=gateway.url, headers=headers, timeout=REQUEST_TIMEOUT_S) as http:
                await wait_ready(http, gateway)
                task = progress.add_task("sandbox: plain requests idle, then under attack",
                                         total=plain_requests * (1 + len(ATTACKS)))  # fmt: skip
                await _plain(http, 5, progress, progress.add_task("sandbox: warm-up", total=5))
                idle, idle_errors = await _plain(http, plain_requests, progress, task)
                if idle_errors:
                    notes.append(f"sandbox phase: {idle_errors} plain request(s) failed at idle")
                runs = []
                for number, name in enumerate(ATTACKS):
                    stop, hits = asyncio.Event(), Counter[str]()
                    loops = [asyncio.create_task(_attack_loop(http, number, stop, hits)) for _ in range(attackers)]
                    await asyncio.sleep(1.0)  # the bombs are running
                    under, errors = await _plain(http, plain_requests, progress, task)
                    stop.set()
                    finished = sum(await asyncio.gather(*loops))
                    runs.append(AttackRun(attack=name, p50_ms=_ms(under, 50), p95_ms=_ms(under, 95),
                                          plain_requests=len(under) + errors, plain_errors=errors,
                                          attacks=finished, limits_hit=dict(hits)))  # fmt: skip
        finally:
            gateway.stop()
    result = SandboxStats(isolation=runner.describe(), attackers=attackers, idle_p50_ms=_ms(idle, 50),
                          idle_p95_ms=_ms(idle, 95), runs=runs,
                          plain_engine="llama.cpp" if plain_worker_urls else None)  # fmt: skip
    return result, notes


def main() -> None:
    """`python -m functions.offline.bench.phases.sandbox_phase [WORKER_URL]`: this phase alone, its table printed;
    with a real `mini` worker's URL (a running `fleetchat up`), the plain requests go to it."""
    import sys

    from functions.offline.bench.results.sandbox_results import sandbox_lines

    workers = sys.argv[1:] or None
    with Progress() as progress:
        result, notes = asyncio.run(sandbox_phase(progress, plain_requests=60, attackers=2, plain_worker_urls=workers))
    print("\n".join([*sandbox_lines(result), *notes]))


if __name__ == "__main__":
    main()

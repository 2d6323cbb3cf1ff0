"""Does the shadow judge's budget hold for the fleet, not per gateway? On a real local fleet (`fleetchat chaos`'s: 2
gateways behind HAProxy, 2 SmolLM2 replicas, redis-server as the shared control state) with every answer sampled for
the judge (the `mini` pool judging itself) and a budget of `calls_per_minute`: a burst of requests through the
balancer, then the judge calls both gateways made (scored or failed) against those dropped for the budget.

    python -m functions.offline.chaos.judge_budget [--calls-per-minute 4] [--requests 16]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx
from pydantic import BaseModel

from functions.metrics.gateway import SHADOW_JUDGE_SAMPLES
from functions.offline.bench import prompts
from functions.offline.bench.phases.priority_phase import admitted_prompts
from functions.offline.bench.prom import sample_value
from functions.offline.chaos.fleet import local_fleet
from functions.offline.measure.load import make_client, run_level

MODEL = "mini"
SETTLE_S = 60.0  # judge calls run off the request path: wait for the queue to drain (or time out)


class JudgeBudgetResult(BaseModel):
    calls_per_minute: float
    requests: int
    elapsed_s: float  # from the first request to the last count read
    allowed: float  # the fleet's bucket: a minute's burst plus what refilled while the run lasted
    calls: float  # judge calls made over both gateways (scored + failed)
    dropped_budget: float
    per_gateway_calls: list[float]

    @property
    def held(self) -> bool:
        return self.calls <= self.allowed


def _count(text: str, outcome: str) -> float:
    return sample_value(text, SHADOW_JUDGE_SAMPLES, {"outcome": outcome}) or 0.0


async def measure(calls_per_minute: float, requests: int) -> JudgeBudgetResult:
    env = {
        "FLEETCHAT_SHADOW_JUDGE_SHARE": "1",
        "FLEETCHAT_SHADOW_JUDGE_CANDIDATE_POOL": MODEL,
        "FLEETCHAT_SHADOW_JUDGE_CALLS_PER_MINUTE": str(calls_per_minute),
        "FLEETCHAT_JUDGE_POOL": MODEL,
    }
    with (
        tempfile.TemporaryDirectory(prefix="fleetchat-judge-") as tmp,
        local_fleet(Path(tmp), model=MODEL, gateways=2, replicas=2, extra_env=env) as fleet,
    ):
        messages = [prompts.generation_messages(i, "judge") for i in admitted_prompts(requests, "judge")]
        client = make_client(fleet.url, fleet.api_key, 600)
        t0 = time.monotonic()
        await run_level(client, MODEL, messages, 8, 24, headers={"cache-control": "no-cache"})
        await client.close()
        async with httpx.AsyncClient() as http:
            deadline = time.monotonic() + SETTLE_S
            while True:
                texts = [(await http.get(f"{url}/metrics", timeout=10)).text for url in fleet.gateway_urls]
                sampled = sum(_count(t, o) for t in texts for o in ("scored", "failed", "dropped_budget"))
                if sampled >= requests or time.monotonic() > deadline:
                    break
                await asyncio.sleep(1.0)
        elapsed = time.monotonic() - t0
    per_gateway = [_count(t, "scored") + _count(t, "failed") for t in texts]
    return JudgeBudgetResult(
        calls_per_minute=calls_per_minute,
        requests=requests,
        elapsed_s=elapsed,
        allowed=calls_per_minute * (1 + elapsed / 60.0),
        calls=sum(per_gateway),
        dropped_budget=sum(_count(t, "dropped_budget") for t in texts),
        per_gateway_calls=per_gateway,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls-per-minute", type=float, default=4.0)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--out", type=Path, default=Path("bench-results/judge-budget.json"))
    args = parser.parse_args()
    result = asyncio.run(measure(args.calls_per_minute, args.requests))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(result.model_dump_json(indent=2), encoding="utf-8")
    print(result.model_dump_json(indent=2), f"\nheld: {result.held}")
    raise SystemExit(0 if result.held else 1)


if __name__ == "__main__":
    main()

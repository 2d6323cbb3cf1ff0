"""Goodput per tier: streamed requests under one key per tier, judged client-side against the tier's `TierSlo` with
the gateway's own rule (functions.control.slo_observation.meets_slo); first every tier at once (the mixed load the
priority admission has to sort out), then each tier alone from our client and from aiperf side by side (an independent
check).

The keys belong to bench tenants of purpose "eval" (never billed), one per tier, created through the admin API the
first time (the eval job's mechanism, functions/offline/evals/tenants.py) and kept in a 0600 file in the output
directory. Their traffic is labelled tier="eval" in the gateway's metrics, which gives a server-side cross-check of the
whole mixed run (the gateway's own goodput counter over the same requests).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from openai.types.chat import ChatCompletionMessageParam
from rich.progress import Progress

from functions.control.slo_observation import meets_slo
from functions.metrics.gateway import EVAL_TIER
from functions.offline.bench import aiperf_check, prompts
from functions.offline.bench.results.records import AiperfGoodput, GoodputComparison, GoodputStats, TierGoodput
from functions.offline.measure import stats
from functions.offline.measure.load import make_client, run_level
from functions.offline.measure.stats import RequestResult
from shared.fleet.tables import tables
from shared.fleet.tiers import Tier, TierSlo
from shared.metric_names import GATEWAY_GOODPUT, counter_sample

KEYS_FILE = "bench_keys.json"
AIPERF_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class GoodputPlan:
    concurrency: int  # streams per tier
    requests: int  # per tier
    max_tokens: int
    aiperf: str | None  # the aiperf executable, None: no independent check
    out_dir: Path
    timeout_s: float


def mean_itl(result: RequestResult) -> float | None:
    """aiperf's inter-token latency of one request: (latency - TTFT) / (output tokens - 1)."""
    if result.ttft_s is None or result.total_s is None or result.output_tokens < 2:
        return None
    return (result.total_s - result.ttft_s) / (result.output_tokens - 1)


def _meets_mean_itl(slo: TierSlo, result: RequestResult) -> bool:
    """aiperf's goodput rule for the same SLO: TTFT and the request's mean inter-token latency within it."""
    itl = mean_itl(result)
    ttft_ok = result.ttft_s is not None and result.ttft_s <= slo.ttft_p95_s
    return ttft_ok and (itl is None or itl <= slo.inter_token_p95_s)


def judge(tier: Tier, pool: str, concurrency: int, results: list[RequestResult]) -> TierGoodput:
    slo: TierSlo = tables().tiers[tier].slo
    ok = [r for r in results if r.ok]
    met = sum(meets_slo(slo, r.ttft_s, r.itl_s) for r in ok)
    met_mean = sum(_meets_mean_itl(slo, r) for r in ok)
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    gaps = [g for r in ok for g in r.itl_s]
    errors = [r.error for r in results if r.error is not None]
    n = len(results)
    return TierGoodput(
        tier=tier.value,
        pool=pool,
        slo_ttft_s=slo.ttft_p95_s,
        slo_inter_token_s=slo.inter_token_p95_s,
        concurrency=concurrency,
        requests=n,
        errors=len(errors),
        met=met,
        goodput=met / n if n else None,
        met_mean_itl=met_mean,
        goodput_mean_itl=met_mean / n if n else None,
        ttft_p50_ms=stats.to_ms(stats.percentile(ttfts, 50)),
        ttft_p95_ms=stats.to_ms(stats.percentile(ttfts, 95)),
        itl_p95_ms=stats.to_ms(stats.percentile(gaps, 95)),
        error_samples=list(dict.fromkeys(errors))[: stats.MAX_ERROR_SAMPLES],
    )


async def _server_goodput(http: httpx.AsyncClient, url: str) -> tuple[float, float] | None:
    """(met, judged) of the gateway's goodput counter for the bench tenants' label, or None if unreadable."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = (await http.get(f"{url.rstrip('/')}/metrics")).text
    except httpx.HTTPError:
        return None
    met = judged = 0.0
    name = counter_sample(GATEWAY_GOODPUT)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("tier") == EVAL_TIER:
                judged += sample.value
                met += sample.value if sample.labels.get("met") == "true" else 0.0
    return met, judged


class GoodputPhase:
    def __init__(self, url: str, keys: dict[Tier, str], plan: GoodputPlan, progress: Progress) -> None:
        self.url = url
        self.keys = keys
        self.plan = plan
        self.progress = progress
        self.run_id = secrets.token_hex(3)

    def _prompts(self, tier: Tier, label: str) -> list[list[ChatCompletionMessageParam]]:
        tag = f"{self.run_id}-{label}-{tier.value}"
        return [prompts.generation_messages(i, f"{tag}-{i}") for i in range(self.plan.requests)]

    async def _ours(self, tier: Tier, label: str, on_done: Callable[[RequestResult], None]) -> TierGoodput:
        pool = tables().tiers[tier].default_pool
        client = make_client(self.url, self.keys[tier], self.plan.timeout_s)
        try:
            run = await run_level(
                client, pool, self._prompts(tier, label), self.plan.concurrency, self.plan.max_tokens, on_done=on_done
            )
        finally:
            await client.close()
        return judge(tier, pool, self.plan.concurrency, run.results)

    async def mixed(self) -> tuple[list[TierGoodput], tuple[float, float] | None]:
        tiers = list(self.keys)
        task = self.progress.add_task("goodput: every tier at once", total=len(tiers) * self.plan.requests)
        async with httpx.AsyncClient(timeout=10.0) as http:
            before = await _server_goodput(http, self.url)
            results = await asyncio.gather(
                *(self._ours(tier, "mixed", lambda _r: self.progress.advance(task)) for tier in tiers)
            )
            after = await _server_goodput(http, self.url)
        server = None if before is None or after is None else (after[0] - before[0], after[1] - before[1])
        return list(results), server

    async def alone(self) -> list[GoodputComparison]:
        """Each tier alone: our client, then aiperf with the same prompts and load."""
        out = []
        for tier in self.keys:
            label = f"goodput: {tier.value} alone (ours, then aiperf)"
            task = self.progress.add_task(label, total=self.plan.requests + 1)
            ours = await self._ours(tier, "alone", lambda _r, task=task: self.progress.advance(task))
            checked = None
            if self.plan.aiperf is not None:
                checked = await asyncio.to_thread(self._aiperf, tier)
            self.progress.advance(task)
            out.append(GoodputComparison(ours=ours, aiperf=checked))
        return out

    def _aiperf(self, tier: Tier) -> AiperfGoodput:
        assert self.plan.aiperf is not None
        work = self.plan.out_dir / "aiperf" / tier.value
        work.mkdir(parents=True, exist_ok=True)
        try:
            tokenizer = aiperf_check.tokenizer_dir(self.plan.out_dir / "aiperf" / "tokenizer")
        except Exception as exc:  # no tokenizer, no aiperf run: the rest of the phase stands
            return aiperf_check.failed(f"no tokenizer for aiperf: {type(exc).__name__}: {exc}")
        dataset = aiperf_check.write_dataset(work / "prompts.jsonl", self._prompts(tier, "aiperf"))
        cmd = aiperf_check.command(
            self.plan.aiperf,
            url=self.url,
            api_key=self.keys[tier],
            model=tables().tiers[tier].default_pool,
            dataset=dataset,
            tokenizer=tokenizer,
            concurrency=self.plan.concurrency,
            requests=self.plan.requests,
            max_tokens=self.plan.max_tokens,
            slo=tables().tiers[tier].slo,
            artifact_dir=work / "artifacts",
        )
        return aiperf_check.run_aiperf(cmd, work / "artifacts", AIPERF_TIMEOUT_S)


async def goodput_phase(url: str, keys: dict[Tier, str], plan: GoodputPlan, progress: Progress) -> GoodputStats:
    phase = GoodputPhase(url, keys, plan, progress)
    mixed, server = await phase.mixed()
    result = GoodputStats(max_tokens=plan.max_tokens, mixed=mixed)
    if server is not None and server[1] > 0:
        result.server_goodput, result.server_judged = server[0] / server[1], server[1]
    result.alone = await phase.alone()
    if plan.aiperf is None:
        result.notes.append(
            "aiperf not found (pip install aiperf==0.13.0 in its own venv; FLEETCHAT_AIPERF=path/to/aiperf): no "
            "independent goodput check in this run."
        )
    return result

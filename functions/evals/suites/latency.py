"""Latency: time to first token and inter-token gaps, p50 and p95 per tier, from streamed requests made with the
openai SDK (as a user's client sees them), gated by the tier table's SLOs."""

from __future__ import annotations

import itertools
import time

import numpy as np
import openai

from functions.evals.suite import CaseResult, Direction, Metric, Progress, SuiteResult
from functions.evals.target import EvalTarget
from shared.tiers import TIER_TABLE, Tier

ASKS = (
    "Name three rivers in Europe.",
    "Give me a short tip for sleeping better.",
    "What is the capital of Canada?",
    "Suggest a name for a small bakery.",
    "Explain what a prime number is in one sentence.",
    "List two benefits of walking every day.",
    "How many legs does a spider have?",
    "Write a one-line greeting for a birthday card.",
    "What does a thermometer measure?",
    "Recommend a vegetable that grows well in pots.",
)
REQUESTS_PER_TIER = 10
MAX_TOKENS = 32
# A p95 may worsen by this share of its SLO against the baseline before the gate calls it a regression.
REGRESSION_SHARE_OF_SLO = 0.25
TIER_POOL: dict[Tier, str] = {Tier.FREE: "mini", Tier.PLUS: "flagship"}


class LatencySuite:
    name = "latency"
    description = "TTFT and inter-token p50/p95 per tier from streamed requests, against the tier table's SLOs."

    def __init__(self, *, limit: int | None = None, requests: int = REQUESTS_PER_TIER) -> None:
        self.requests = min(requests, limit) if limit else requests

    async def run(self, target: EvalTarget, progress: Progress) -> SuiteResult:
        tiers = [tier for tier in TIER_POOL if tier in target.keys]
        progress.start(self.name, len(tiers) * (self.requests + 1))
        result = SuiteResult(suite=self.name)
        for tier in tiers:
            pool = TIER_POOL[tier]
            # One unmeasured request first: a scaled-to-zero pool's cold start is not the steady-state latency.
            await self._stream(target, tier, pool, ASKS[-1])
            progress.advance(self.name)
            ttfts, gaps, errors = [], [], 0
            for index in range(self.requests):
                ask = ASKS[index % len(ASKS)]
                case_id = f"{tier.value}.{index}"
                try:
                    ttft, tier_gaps = await self._stream(target, tier, pool, ask)
                except (openai.APIError, RuntimeError) as exc:
                    errors += 1
                    result.cases.append(CaseResult(case_id=case_id, passed=False, detail={"error": str(exc)[:200]}))
                    progress.advance(self.name)
                    continue
                ttfts.append(ttft)
                gaps.extend(tier_gaps)
                result.cases.append(
                    CaseResult(
                        case_id=case_id,
                        score=ttft,
                        detail={"ttft_s": round(ttft, 4), "chunks": len(tier_gaps) + 1, "pool": pool},
                    )
                )
                progress.advance(self.name)
            result.metrics.extend(_tier_metrics(tier, ttfts, gaps, errors, self.requests))
        result.notes.append(
            "SLOs come from the tier table (shared/tiers.py TierPolicy.slo); its values are sized for the embedded "
            "CPU stack. Requests are sequential (no load), after one unmeasured warm-up request per tier."
        )
        return result

    async def _stream(self, target: EvalTarget, tier: Tier, pool: str, ask: str) -> tuple[float, list[float]]:
        """(time to the first content token, gaps between later content chunks), in seconds."""
        started = time.perf_counter()
        stream = await target.client(tier).chat.completions.create(
            model=pool,
            messages=[{"role": "user", "content": ask}],
            max_tokens=MAX_TOKENS,
            stream=True,
            stream_options={"include_usage": True},
        )
        arrivals = []
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                arrivals.append(time.perf_counter())
        if not arrivals:
            raise RuntimeError("the stream carried no content")
        return arrivals[0] - started, [b - a for a, b in itertools.pairwise(arrivals)]


def _tier_metrics(tier: Tier, ttfts: list[float], gaps: list[float], errors: int, sent: int) -> list[Metric]:
    slo = TIER_TABLE[tier].slo
    prefix = f"latency.{tier.value}"
    metrics = [
        Metric(
            name=f"{prefix}.error_rate",
            value=errors / sent if sent else 0.0,
            unit="ratio",
            direction=Direction.LOWER_IS_BETTER,
            threshold=0.0,
            n=sent,
        )
    ]
    for label, values, bound in (("ttft", ttfts, slo.ttft_p95_s), ("inter_token", gaps, slo.inter_token_p95_s)):
        if not values:
            continue
        p50, p95 = (float(v) for v in np.percentile(values, [50, 95]))
        metrics.append(
            Metric(
                name=f"{prefix}.{label}_p50_s", value=p50, unit="s", direction=Direction.LOWER_IS_BETTER, n=len(values)
            )
        )
        metrics.append(
            Metric(
                name=f"{prefix}.{label}_p95_s",
                value=p95,
                unit="s",
                direction=Direction.LOWER_IS_BETTER,
                threshold=bound,
                tolerance=REGRESSION_SHARE_OF_SLO * bound,
                n=len(values),
                note=f"SLO {bound} s",
            )
        )
    return metrics

"""Latency: time to first token and inter-token gaps, p50 and p95 per tier, from streamed requests made with the
openai SDK (as a user's client sees them), gated by the tier table's SLOs."""

from __future__ import annotations

import numpy as np

from functions.offline.evals.suite import CaseResult, Direction, Metric, Progress, SuiteResult
from functions.offline.evals.target import EvalTarget
from functions.offline.measure.load import stream_chat
from functions.offline.measure.stats import RequestResult
from shared.fleet.tables import tables
from shared.fleet.tiers import Tier

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
            warm_up = await _stream(target, tier, pool, ASKS[-1])
            if warm_up.ttft_s is None:
                raise RuntimeError(f"{tier.value} warm-up request failed: {warm_up.error or 'no content'}")
            progress.advance(self.name)
            ttfts, gaps, errors = [], [], 0
            for index in range(self.requests):
                case_id = f"{tier.value}.{index}"
                measured = await _stream(target, tier, pool, ASKS[index % len(ASKS)])
                progress.advance(self.name)
                if measured.ttft_s is None:
                    errors += 1
                    error = measured.error or "the stream carried no content"
                    result.cases.append(CaseResult(case_id=case_id, passed=False, detail={"error": error}))
                    continue
                ttfts.append(measured.ttft_s)
                gaps.extend(measured.itl_s)
                result.cases.append(
                    CaseResult(
                        case_id=case_id,
                        score=measured.ttft_s,
                        detail={"ttft_s": round(measured.ttft_s, 4), "chunks": measured.content_chunks, "pool": pool},
                    )
                )
            result.metrics.extend(_tier_metrics(tier, ttfts, gaps, errors, self.requests))
        result.notes.append(
            "SLOs come from the tier table (shared/fleet/tiers.py TierPolicy.slo); its values are sized for the "
            "embedded CPU stack. Requests are sequential (no load), after one unmeasured warm-up request per tier."
        )
        return result


async def _stream(target: EvalTarget, tier: Tier, pool: str, ask: str) -> RequestResult:
    """One streamed request as `fleetchat bench` makes it: time to the first content chunk and the gaps after it."""
    return await stream_chat(target.client(tier), pool, [{"role": "user", "content": ask}], MAX_TOKENS)


def _tier_metrics(tier: Tier, ttfts: list[float], gaps: list[float], errors: int, sent: int) -> list[Metric]:
    slo = tables().tiers[tier].slo
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

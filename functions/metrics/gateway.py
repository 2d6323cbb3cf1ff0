"""The gateway's own Prometheus metrics: requests by outcome (chat requests by pool, every endpoint by route), the
per-tier SLO view (time to first token, inter-token gaps, end-to-end, goodput) and spend, time to the worker's first
byte, conversation turns, rate limiting, the tokens written to the ledger, the safety pipeline's blocks, halts and
latency, answer feedback, and the shadow judge's samples, queue, rolling scores, delta and alert.

Metric names and what each label holds: docs/observability.md. Label values are always bounded (tiers, pools, route
templates, status codes), never a raw client string."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from shared import metric_names as names
from shared.fleet.tables import tables
from shared.fleet.tiers import Tier
from shared.storage.accounts import Tenant, TenantPurpose

# The shadow judge's metrics (docs/shadow-judge.md).
SHADOW_JUDGE_SAMPLES = "fleetchat_shadow_judge_samples"
SHADOW_JUDGE_QUEUE_DEPTH = "fleetchat_shadow_judge_queue_depth"
SHADOW_JUDGE_LATENCY = "fleetchat_shadow_judge_call_seconds"
SHADOW_JUDGE_SCORE = "fleetchat_shadow_judge_score"
SHADOW_JUDGE_WINDOW_SAMPLES = "fleetchat_shadow_judge_window_samples"
SHADOW_JUDGE_DELTA = "fleetchat_shadow_judge_score_delta"
SHADOW_JUDGE_ALERT = "fleetchat_shadow_judge_alert"

# The tier label of an eval tenant's traffic: kept apart from customers' (the nightly eval run must neither raise nor
# hide a tier's SLO or spend alert) but still in the totals.
EVAL_TIER = "eval"


def _with_slo_bounds(base: tuple[float, ...], slo_values: set[float]) -> tuple[float, ...]:
    """Histogram buckets that include every tier's SLO value, so "share within the SLO" is exact, not interpolated."""
    return tuple(sorted(set(base) | slo_values))


TTFT_BUCKETS = _with_slo_bounds(
    (0.05, 0.1, 0.25, 0.5, 0.75, 1, 2, 5, 7.5, 10, 20, 30, 60), {p.slo.ttft_p95_s for p in tables().tiers.values()}
)
INTER_TOKEN_BUCKETS = _with_slo_bounds(
    (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.4, 0.5, 0.75, 1, 2, 5),
    {p.slo.inter_token_p95_s for p in tables().tiers.values()},
)
E2E_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)


def tier_label(tenant: Tenant) -> str:
    """The `tier` label of a tenant's requests: its tier, or "eval" for the eval job's tenants."""
    return EVAL_TIER if tenant.purpose is TenantPurpose.EVAL else tenant.tier.value


FirstTokenListener = Callable[[str, Tier, float], None]  # (pool, tier, seconds from arrival to the first content)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # Called with every streamed request's TTFT as it is observed (functions/control/slo_observation.py), on the
        # event loop: must not block. The priority admission's overload signal registers here.
        self.first_token_listeners: list[FirstTokenListener] = []
        self.requests = Counter(
            names.GATEWAY_REQUESTS, "Chat requests by model and status.", ["model", "status"], registry=self.registry
        )
        self.http_responses = Counter(
            names.GATEWAY_HTTP_RESPONSES,
            "Responses of every endpoint by route template, method and status (a stream by its response status).",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.ttft = Histogram(
            names.GATEWAY_TTFT,
            "Streamed chat requests: arrival at the gateway to the first content chunk sent to the client.",
            ["tier", "pool"],
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.inter_token = Histogram(
            names.GATEWAY_INTER_TOKEN,
            "Streamed chat requests: gaps between consecutive content chunks sent to the client.",
            ["tier", "pool"],
            buckets=INTER_TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.e2e = Histogram(
            names.GATEWAY_E2E,
            "Chat answers (streamed to their end, or whole): arrival at the gateway to the last byte sent.",
            ["tier", "pool"],
            buckets=E2E_BUCKETS,
            registry=self.registry,
        )
        self.goodput = Counter(
            names.GATEWAY_GOODPUT,
            "Streamed chat requests judged against their tier's SLO (TTFT and the request's p95 inter-token gap); "
            "a stream that failed, or a 5xx after routing, is met=false.",
            ["tier", "pool", "met"],
            registry=self.registry,
        )
        self.spend = Counter(
            names.GATEWAY_SPEND_USD,
            "What the tokens of closed requests cost to serve (tokens x the pool's price in shared/fleet/pools.py), "
            "USD.",
            ["tier", "pool"],
            registry=self.registry,
        )
        for tier, policy in tables().tiers.items():  # every customer series from the start: a rate over them has no gap
            for pool in policy.pools:
                self.goodput.labels(tier.value, pool, "true")
                self.goodput.labels(tier.value, pool, "false")
                self.spend.labels(tier.value, pool)
        self.upstream_ttfb = Histogram(
            names.GATEWAY_UPSTREAM_LATENCY,
            "Time from request to the worker's response headers.",
            ["model"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )

        self.conversation_turns = Counter(
            names.GATEWAY_CONVERSATION_TURNS,
            "Conversational chat turns by how the history was found and whether the turn was saved.",
            ["history", "stored"],
            registry=self.registry,
        )
        self.rate_limited = Counter(
            names.GATEWAY_RATE_LIMITED,
            "Requests refused with 429, by tier and the limit that refused them.",
            ["tier", "limit"],
            registry=self.registry,
        )
        self.admission_unavailable = Counter(
            names.GATEWAY_ADMISSION_UNAVAILABLE,
            "Requests admitted without a limit check because the counter store was unavailable (fail open).",
            registry=self.registry,
        )
        self.ledger_tokens = Counter(
            names.GATEWAY_LEDGER_TOKENS,
            "Tokens written to the ledger, by model, kind (prompt, completion, cached) and outcome.",
            ["model", "kind", "outcome"],
            registry=self.registry,
        )
        self.ledger_spooled = Counter(
            names.GATEWAY_LEDGER_SPOOLED,
            "Ledger entries spooled to the local file because the store was unavailable.",
            registry=self.registry,
        )

        self.safety_blocks = Counter(
            names.SAFETY_BLOCKS,
            "Requests refused by the safety gate, by layer, detector and category.",
            ["layer", "detector", "category"],
            registry=self.registry,
        )
        self.safety_halts = Counter(
            names.SAFETY_HALTS,
            "Streams halted by the safety post-filter, by layer, detector and category.",
            ["layer", "detector", "category"],
            registry=self.registry,
        )
        self.safety_latency = Histogram(
            names.SAFETY_CHECK_LATENCY,
            "Time the safety gate spends judging a request's conversation.",
            ["layer"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
            registry=self.registry,
        )
        self.safety_audit_failures = Counter(
            names.SAFETY_AUDIT_FAILURES,
            "Safety audit records that could not be written (store unavailable).",
            registry=self.registry,
        )
        self.safety_guard_failures = Counter(
            names.SAFETY_GUARD_FAILURES,
            "Checks a remote guard could not answer, by guard and what the fail policy did (refused or embedded).",
            ["guard", "action"],
            registry=self.registry,
        )

        self.feedback = Counter(
            names.FEEDBACK,
            "Answer ratings given (a second rating of a message counts again).",
            ["rating"],
            registry=self.registry,
        )
        self.feedback_removed = Counter(
            names.FEEDBACK_REMOVED, "Answer ratings removed by their tenant.", registry=self.registry
        )
        for rating in ("up", "down"):  # both series from the start, so a rate over them never has a gap
            self.feedback.labels(rating)
        self.shadow_samples = Counter(
            SHADOW_JUDGE_SAMPLES,
            "Answers sampled for the shadow judge, by pool and outcome (scored, dropped_queue_full, dropped_budget, "
            "failed).",
            ["pool", "outcome"],
            registry=self.registry,
        )
        self.shadow_queue_depth = Gauge(
            SHADOW_JUDGE_QUEUE_DEPTH, "Sampled answers waiting for the shadow judge.", registry=self.registry
        )
        self.shadow_latency = Histogram(
            SHADOW_JUDGE_LATENCY,
            "Duration of one shadow-judge call (retries included).",
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=self.registry,
        )
        self.shadow_score = Gauge(
            SHADOW_JUDGE_SCORE,
            "Rolling mean judge score (1-5) over the pool's last N scored answers, by criterion (overall, helpfulness, "
            "accuracy, format).",
            ["pool", "criterion"],
            registry=self.registry,
        )
        self.shadow_window_samples = Gauge(
            SHADOW_JUDGE_WINDOW_SAMPLES,
            "Scores in the pool's rolling window.",
            ["pool"],
            registry=self.registry,
        )
        self.shadow_delta = Gauge(
            SHADOW_JUDGE_DELTA,
            "Rolling mean overall score of the reference pool minus the candidate's (flagship - mini); NaN until both "
            "have a score.",
            registry=self.registry,
        )
        self.shadow_delta.set(float("nan"))
        self.shadow_alert = Gauge(
            SHADOW_JUDGE_ALERT,
            "1 while the score delta exceeds its threshold with enough scores in both pools, else 0.",
            registry=self.registry,
        )

    def count_spend(self, tenant: Tenant, pool: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Add what a closed request's tokens cost on `pool` (a pool without a price, e.g. a test's, costs nothing)."""
        found = tables().pools.get(pool) or tables().external_pools.get(
            pool
        )  # a hosted endpoint costs its provider's price
        if found is not None:
            self.spend.labels(tier_label(tenant), pool).inc(found.price.cost_usd(prompt_tokens, completion_tokens))

    def render(self) -> bytes:
        return generate_latest(self.registry)

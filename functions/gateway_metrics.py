"""The gateway's own Prometheus metrics: requests by outcome, time to the worker's first byte, conversation turns,
rate limiting, the tokens written to the ledger, the safety pipeline's blocks, halts and latency, answer feedback,
and the shadow judge's samples, queue, rolling scores, delta and alert."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from shared import metric_names as names

# The shadow judge's metrics (docs/shadow-judge.md).
SHADOW_JUDGE_SAMPLES = "fleetchat_shadow_judge_samples"
SHADOW_JUDGE_QUEUE_DEPTH = "fleetchat_shadow_judge_queue_depth"
SHADOW_JUDGE_LATENCY = "fleetchat_shadow_judge_call_seconds"
SHADOW_JUDGE_SCORE = "fleetchat_shadow_judge_score"
SHADOW_JUDGE_WINDOW_SAMPLES = "fleetchat_shadow_judge_window_samples"
SHADOW_JUDGE_DELTA = "fleetchat_shadow_judge_score_delta"
SHADOW_JUDGE_ALERT = "fleetchat_shadow_judge_alert"


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            names.GATEWAY_REQUESTS, "Chat requests by model and status.", ["model", "status"], registry=self.registry
        )
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

    def render(self) -> bytes:
        return generate_latest(self.registry)

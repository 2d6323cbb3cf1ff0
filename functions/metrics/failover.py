"""The gateway's failover metrics: replica breaker states, retries before the first byte, mid-stream continuations
and the continuation's time to first token (docs/reliability.md). Registered on the gateway's registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

BREAKER_STATE = "fleetchat_gateway_breaker_state"
UPSTREAM_RETRIES = "fleetchat_gateway_upstream_retries"  # exposed as ..._total
CONTINUATIONS = "fleetchat_gateway_continuations"  # exposed as ..._total
CONTINUATION_TTFT = "fleetchat_gateway_continuation_ttft_seconds"


class FailoverMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.breaker_state = Gauge(
            BREAKER_STATE,
            "Replica circuit breaker state: 0 closed, 1 half-open, 2 open (replica = its index in the pool).",
            ["pool", "replica"],
            registry=registry,
        )
        self.upstream_retries = Counter(
            UPSTREAM_RETRIES,
            "Requests sent again to another replica before their first byte (connect error, first-byte timeout).",
            ["pool"],
            registry=registry,
        )
        self.continuations = Counter(
            CONTINUATIONS,
            "Answers whose replica died mid-stream, by outcome: continued on another replica of the pool, on the "
            "tier's fallback pool, or failed (no replica could continue: the stream ended with an error event).",
            ["pool", "outcome"],
            registry=registry,
        )
        # The continuation overhead the client sees: from noticing the broken leg to the second leg's first token.
        self.continuation_ttft = Histogram(
            CONTINUATION_TTFT,
            "Time from a replica's failure mid-stream to the first content of the continuing leg.",
            ["pool"],
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry,
        )

"""The control loop's Prometheus metrics: pool queues and their waits, refusals, downgrades and brownout, registered on
the gateway's registry (`GatewayMetrics.registry`) beside the gateway's own metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

QUEUE_DEPTH = "fleetchat_gateway_queue_depth"
QUEUE_WAIT = "fleetchat_gateway_queue_wait_seconds"
POOL_IN_FLIGHT = "fleetchat_gateway_pool_in_flight"
POOL_CAPACITY = "fleetchat_gateway_pool_capacity"
BROWNOUT_ACTIVE = "fleetchat_gateway_brownout_active"
BROWNOUT_POOL_ACTIVE = "fleetchat_gateway_brownout_pool_active"
BROWNOUT_TRANSITIONS = "fleetchat_gateway_brownout_transitions"  # counter: exposed with _total
DOWNGRADES = "fleetchat_gateway_downgrades"  # counter
ADMISSION_REFUSED = "fleetchat_gateway_admission_refused"  # counter


class ControlMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.queue_depth = Gauge(QUEUE_DEPTH, "Requests waiting for a place in the pool.", ["pool"], registry=registry)
        self.queue_wait = Histogram(
            QUEUE_WAIT,
            "Time a request waited for a place in its pool (0 when admitted at once), by tier and pool.",
            ["tier", "pool"],
            buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
            registry=registry,
        )
        self.in_flight = Gauge(POOL_IN_FLIGHT, "Requests holding a place in the pool.", ["pool"], registry=registry)
        self.capacity = Gauge(
            POOL_CAPACITY, "Places per pool: requests this gateway lets run at once.", ["pool"], registry=registry
        )
        self.brownout_active = Gauge(
            BROWNOUT_ACTIVE, "1 while brownout caps completion budgets in any pool, else 0.", registry=registry
        )
        self.brownout_pool_active = Gauge(
            BROWNOUT_POOL_ACTIVE, "1 while brownout caps completion budgets in this pool.", ["pool"], registry=registry
        )
        self.brownout_transitions = Counter(
            BROWNOUT_TRANSITIONS,
            "Brownout switching on or off in a pool (automatic or by the admin override).",
            ["to"],
            registry=registry,
        )
        for to in ("on", "off"):  # both series from the start, so increase() over them never has a gap
            self.brownout_transitions.labels(to)
        self.downgrades = Counter(
            DOWNGRADES,
            "Requests answered by another pool of the tier than the one asked for, and why (unreachable, overload).",
            ["tier", "from_pool", "to_pool", "reason"],
            registry=registry,
        )
        self.refused = Counter(
            ADMISSION_REFUSED,
            "Requests refused with 503 capacity_exceeded, by tier, pool and reason (queue_full, wait_timeout).",
            ["tier", "pool", "reason"],
            registry=registry,
        )

"""The worker's Prometheus metrics under vLLM's names, so one dashboard and the benchmark read either engine."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpu_workers.engine import Engine
from shared import metric_names as names

TTFT_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
ITL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
E2E_BUCKETS = (0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0)


class _EngineStateCollector(Collector):
    """Engine-owned numbers (queue depths, KV usage, prefix counters) read at scrape time."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        stats = self._engine.stats()
        label = [self._engine.model_name]
        for name, doc, value in (
            (names.NUM_REQUESTS_RUNNING, "Requests in the running batch.", stats.running),
            (names.NUM_REQUESTS_WAITING, "Requests waiting to be scheduled.", stats.waiting),
            (names.KV_CACHE_USAGE, "KV-cache usage, 1 means 100 percent.", stats.kv_cache_usage),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=["model_name"])
            gauge.add_metric(label, value)
            yield gauge
        for name, doc, value in (
            (names.PREFIX_CACHE_QUERIES, "Prompt tokens looked up in the prefix cache.", stats.prefix_cache_queries),
            (names.PREFIX_CACHE_HITS, "Prompt tokens found in the prefix cache.", stats.prefix_cache_hits),
        ):
            counter = CounterMetricFamily(name, doc, labels=["model_name"])
            counter.add_metric(label, value)
            yield counter


class WorkerMetrics:
    def __init__(self, engine: Engine) -> None:
        self.registry = CollectorRegistry()
        self.model_name = engine.model_name
        self.registry.register(_EngineStateCollector(engine))
        labels = ["model_name"]
        self.ttft = Histogram(
            names.TIME_TO_FIRST_TOKEN, "Time to first token.", labels, buckets=TTFT_BUCKETS, registry=self.registry
        )
        self.itl = Histogram(
            names.INTER_TOKEN_LATENCY, "Inter-token latency.", labels, buckets=ITL_BUCKETS, registry=self.registry
        )
        self.e2e = Histogram(
            names.E2E_REQUEST_LATENCY,
            "End-to-end request latency.",
            labels,
            buckets=E2E_BUCKETS,
            registry=self.registry,
        )
        self.prompt_tokens = Counter(names.PROMPT_TOKENS, "Prefill tokens processed.", labels, registry=self.registry)
        self.generation_tokens = Counter(
            names.GENERATION_TOKENS, "Generation tokens processed.", labels, registry=self.registry
        )
        self.request_success = Counter(
            names.REQUEST_SUCCESS, "Finished requests.", [*labels, "finished_reason"], registry=self.registry
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)

"""Scrape a Prometheus /metrics endpoint and read counter values out of its text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from shared import metric_names as names


def sample_value(text: str, name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """Sum of the samples called `name` (or `name_total`, a counter's exposed sample) whose labels include `labels`.

    None when no sample matches, so "metric absent" and "metric is zero" stay distinct.
    """
    wanted = {name, f"{name}_total"} if not name.endswith("_total") else {name}
    found = False
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in wanted:
                continue
            if labels and any(sample.labels.get(k) != v for k, v in labels.items()):
                continue
            found = True
            total += sample.value
    return total if found else None


@dataclass(frozen=True)
class PrefixCounters:
    """The worker's cumulative prefix-cache counters (prompt tokens looked up, and found)."""

    queries: float
    hits: float


def prefix_counters(text: str, model_name: str | None = None) -> PrefixCounters | None:
    """Read vLLM's prefix-cache counters from a /metrics body; None when the endpoint does not expose them."""
    labels = {"model_name": model_name} if model_name else None
    queries = sample_value(text, names.PREFIX_CACHE_QUERIES, labels)
    hits = sample_value(text, names.PREFIX_CACHE_HITS, labels)
    if queries is None or hits is None:
        return None
    return PrefixCounters(queries=queries, hits=hits)


def sum_counters(counters: Sequence[PrefixCounters]) -> PrefixCounters:
    return PrefixCounters(queries=sum(c.queries for c in counters), hits=sum(c.hits for c in counters))


def hit_rate(before: PrefixCounters, after: PrefixCounters) -> float | None:
    """Prefix-cache hit rate over an interval: delta hits / delta queries (None when nothing was looked up)."""
    queries = after.queries - before.queries
    return (after.hits - before.hits) / queries if queries > 0 else None


async def scrape(client: httpx.AsyncClient, base_url: str, timeout_s: float = 5.0) -> str:
    """GET {base_url}/metrics and return its text (raises httpx errors to the caller)."""
    response = await client.get(f"{base_url.rstrip('/')}/metrics", timeout=timeout_s)
    response.raise_for_status()
    return response.text


async def scrape_prefix_counters(
    client: httpx.AsyncClient, worker_urls: Sequence[str], model_name: str | None
) -> PrefixCounters | None:
    """Prefix counters summed over a pool's replicas; None when any replica cannot be read."""
    counters = []
    for url in worker_urls:
        try:
            text = await scrape(client, url)
        except httpx.HTTPError:
            return None
        parsed = prefix_counters(text, model_name)
        if parsed is None:
            return None
        counters.append(parsed)
    return sum_counters(counters) if counters else None

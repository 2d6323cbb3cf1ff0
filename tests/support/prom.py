"""Read one sample from a Prometheus text endpoint (the worker's vLLM-named metrics)."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def sample(base_url: str, name: str) -> float:
    """Sum of all samples called `name` (across labels)."""
    text = httpx.get(f"{base_url}/metrics", timeout=5).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                total += s.value
    return total


def labelled(base_url: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{base_url}/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0

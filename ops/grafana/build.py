"""Build ops/grafana/fleetchat.json, the fleetchat Grafana dashboard, from the tier table (so each tier's panels draw
its own SLO lines). Run from the repository root after changing a tier's SLO or a panel:

    PYTHONPATH=. python ops/grafana/build.py

tests/unit/deploy/test_ops_rules.py fails when the committed JSON is not what this builds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from shared.fleet.tables import tables

OUT = Path(__file__).with_name("fleetchat.json")
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
WIDTH = 24  # Grafana's grid is 24 columns wide


class Layout:
    """Places panels left to right, wrapping rows, and numbers them."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.x = 0
        self.y = 0
        self.row_height = 0

    def row(self, title: str) -> None:
        self.y += self.row_height
        self.x, self.row_height = 0, 1
        self.panels.append(
            {"type": "row", "title": title, "id": len(self.panels) + 1, "collapsed": False, "panels": []}
            | {"gridPos": {"h": 1, "w": WIDTH, "x": 0, "y": self.y}}
        )
        self.y += 1
        self.row_height = 0

    def add(self, panel: dict[str, Any], w: int = 8, h: int = 8) -> None:
        if self.x + w > WIDTH:
            self.x, self.y, self.row_height = 0, self.y + self.row_height, 0
        panel["id"] = len(self.panels) + 1
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.panels.append(panel)
        self.x += w
        self.row_height = max(self.row_height, h)


def target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref, "range": True}


def timeseries(
    title: str,
    queries: list[tuple[str, str]],
    unit: str,
    *,
    description: str = "",
    threshold: float | None = None,
    stacked: bool = False,
) -> dict[str, Any]:
    """A time series panel; `threshold` draws a dashed red line (an SLO) at that value."""
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    if threshold is not None:
        steps.append({"color": "red", "value": threshold})
    custom: dict[str, Any] = {"thresholdsStyle": {"mode": "dashed" if threshold is not None else "off"}}
    if stacked:
        custom["stacking"] = {"mode": "normal", "group": "A"}
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": [target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(queries)],
        "fieldConfig": {
            "defaults": {"unit": unit, "custom": custom, "thresholds": {"mode": "absolute", "steps": steps}},
            "overrides": [],
        },
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
    }


def quantile(q: float, metric: str, selector: str, by: str = "pool") -> str:
    matchers = f"{{{selector}}}" if selector else ""
    return f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{matchers}[$__rate_interval])))"


def tier_panels(layout: Layout) -> None:
    for tier, policy in tables().tiers.items():
        t, slo = tier.value, policy.slo
        layout.row(f"Tier {t}: SLO TTFT p95 {slo.ttft_p95_s} s, inter-token p95 {slo.inter_token_p95_s} s")
        sel = f'tier="{t}"'
        layout.add(
            timeseries(
                f"{t}: time to first token",
                [
                    (quantile(0.5, "fleetchat_gateway_ttft_seconds", sel), "p50 {{pool}}"),
                    (quantile(0.95, "fleetchat_gateway_ttft_seconds", sel), "p95 {{pool}}"),
                ],
                "s",
                description="Arrival at the gateway to the first content chunk sent (streamed requests).",
                threshold=policy.slo.ttft_p95_s,
            ),
            w=6,
        )
        layout.add(
            timeseries(
                f"{t}: inter-token latency",
                [
                    (quantile(0.5, "fleetchat_gateway_inter_token_seconds", sel), "p50 {{pool}}"),
                    (quantile(0.95, "fleetchat_gateway_inter_token_seconds", sel), "p95 {{pool}}"),
                ],
                "s",
                description="Gaps between content chunks sent to the client.",
                threshold=policy.slo.inter_token_p95_s,
            ),
            w=6,
        )
        goodput = (
            f'sum by (pool) (rate(fleetchat_gateway_goodput_total{{{sel}, met="true"}}[$__rate_interval]))'
            f" / sum by (pool) (rate(fleetchat_gateway_goodput_total{{{sel}}}[$__rate_interval]))"
        )
        layout.add(
            timeseries(
                f"{t}: goodput",
                [(goodput, "{{pool}}")],
                "percentunit",
                description="Share of judged streams meeting both SLOs (alert below 90 %).",
                threshold=0.9,
            ),
            w=6,
        )
        layout.add(
            timeseries(
                f"{t}: end-to-end and spend",
                [
                    (quantile(0.95, "fleetchat_gateway_e2e_seconds", sel), "e2e p95 {{pool}} (s)"),
                    (
                        f"sum by (pool) (rate(fleetchat_gateway_spend_usd_total{{{sel}}}[$__rate_interval])) * 3600",
                        "spend {{pool}} ($/h)",
                    ),
                ],
                "short",
            ),
            w=6,
        )


def fleet_panels(layout: Layout) -> None:
    layout.row("Requests and errors")
    layout.add(
        timeseries(
            "Chat requests by status",
            [("sum by (status) (rate(fleetchat_gateway_requests_total[$__rate_interval]))", "{{status}}")],
            "reqps",
            description="Every chat outcome; the model label is the pool (unknown: refused before routing).",
            stacked=True,
        )
    )
    layout.add(
        timeseries(
            "HTTP responses by status class",
            [
                (
                    "sum by (class) (label_replace(rate(fleetchat_gateway_http_responses_total[$__rate_interval]), "
                    '"class", "${1}xx", "status", "([0-9]).."))',
                    "{{class}}",
                )
            ],
            "reqps",
            stacked=True,
        )
    )
    layout.add(
        timeseries(
            "5xx ratio by route",
            [
                (
                    'sum by (route) (rate(fleetchat_gateway_http_responses_total{status=~"5.."}[$__rate_interval]))'
                    " / sum by (route) (rate(fleetchat_gateway_http_responses_total[$__rate_interval]))",
                    "{{route}}",
                )
            ],
            "percentunit",
            threshold=0.05,
        )
    )
    layout.row("Capacity: queues, brownout, breakers")
    layout.add(
        timeseries(
            "Queue depth and places in use by pool",
            [
                ("max by (pool) (fleetchat_gateway_queue_depth)", "waiting {{pool}}"),
                ("sum by (pool) (fleetchat_gateway_pool_in_flight)", "in flight {{pool}}"),
                ("max by (pool) (fleetchat_gateway_pool_capacity)", "capacity {{pool}}"),
            ],
            "short",
            threshold=32,
        )
    )
    layout.add(
        timeseries(
            "Queue wait p95 by tier",
            [(quantile(0.95, "fleetchat_gateway_queue_wait_seconds", "", by="tier"), "{{tier}}")],
            "s",
        )
    )
    layout.add(
        timeseries(
            "Brownout",
            [
                ("max(fleetchat_gateway_brownout_active)", "active"),
                (
                    "sum by (to) (increase(fleetchat_gateway_brownout_transitions_total[$__rate_interval]))",
                    "switched {{to}}",
                ),
            ],
            "short",
        )
    )
    layout.add(
        timeseries(
            "Breaker state (0 closed, 1 half-open, 2 open)",
            [("max by (pool, replica) (fleetchat_gateway_breaker_state)", "{{pool}} #{{replica}}")],
            "short",
            threshold=2,
        )
    )
    layout.add(
        timeseries(
            "Retries, continuations, downgrades",
            [
                ("sum by (pool) (rate(fleetchat_gateway_upstream_retries_total[$__rate_interval]))", "retry {{pool}}"),
                (
                    "sum by (pool, outcome) (rate(fleetchat_gateway_continuations_total[$__rate_interval]))",
                    "continuation {{pool}} {{outcome}}",
                ),
                (
                    "sum by (tier, to_pool, reason) (rate(fleetchat_gateway_downgrades_total[$__rate_interval]))",
                    "downgrade {{tier}} -> {{to_pool}} ({{reason}})",
                ),
            ],
            "reqps",
        )
    )
    layout.add(
        timeseries(
            "Continuation: failure to the continuing leg's first token",
            [
                (quantile(0.5, "fleetchat_gateway_continuation_ttft_seconds", ""), "p50 {{pool}}"),
                (quantile(0.95, "fleetchat_gateway_continuation_ttft_seconds", ""), "p95 {{pool}}"),
            ],
            "s",
            description="The overhead a client sees when its replica dies mid-stream and another one continues.",
        )
    )
    layout.add(
        timeseries(
            "Admission refusals and rate limits",
            [
                (
                    "sum by (tier, reason) (rate(fleetchat_gateway_admission_refused_total[$__rate_interval]))",
                    "refused {{tier}} {{reason}}",
                ),
                (
                    "sum by (tier, limit) (rate(fleetchat_gateway_rate_limited_total[$__rate_interval]))",
                    "429 {{tier}} {{limit}}",
                ),
            ],
            "reqps",
        )
    )
    layout.row("Spend and workers")
    layout.add(
        timeseries(
            "Spend rate by tier ($/h)",
            [("sum by (tier) (rate(fleetchat_gateway_spend_usd_total[$__rate_interval])) * 3600", "{{tier}}")],
            "currencyUSD",
            description="Tokens x each pool's price (shared/fleet/pools.py). tier=eval is the eval job's own traffic.",
            stacked=True,
        ),
        w=12,
    )
    layout.add(
        timeseries(
            "Worker queue and KV cache",
            [
                ("sum by (model_name) (vllm:num_requests_waiting)", "waiting {{model_name}}"),
                ("max by (model_name) (vllm:kv_cache_usage_perc)", "KV cache used {{model_name}}"),
            ],
            "short",
            description="From the workers' own /metrics (vLLM's names; the local worker exposes the same).",
        ),
        w=12,
    )


def dashboard() -> dict[str, Any]:
    layout = Layout()
    tier_panels(layout)
    fleet_panels(layout)
    return {
        "uid": "fleetchat-gateway",
        "title": "fleetchat gateway: SLOs, capacity, spend",
        "tags": ["fleetchat"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                }
            ]
        },
        "annotations": {"list": []},
        "panels": layout.panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    sys.stdout.write(f"wrote {OUT}\n")

"""The shipped alert rules (ops/prometheus/alerts.yml) and Grafana dashboard (ops/grafana/fleetchat.json): the rule
file has Prometheus' rule-file shape, every expression parses as PromQL, every metric a rule or a panel uses is one
the gateway (or a worker) exposes, the SLO thresholds are the tier table's, the dashboard is what its builder makes;
and, with promtool installed, `promtool check rules` and the rule unit tests (alerts_test.yml) pass."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import promql_parser
import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from functions.metrics.gateway import GatewayMetrics
from shared import metric_names
from shared.fleet.tables import tables

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "ops" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "ops" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "ops" / "grafana" / "fleetchat.json"

# Prometheus' own formats: label names, metric names, durations (model/labels, model/rulefmt, model.ParseDuration).
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
DURATION = re.compile(r"^(?!$)(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",), "summary": ("_count",)}
# The worker's gauges the dashboard reads (vLLM's names: gpu_workers/server/metrics.py registers them).
WORKER_GAUGES = (metric_names.NUM_REQUESTS_RUNNING, metric_names.NUM_REQUESTS_WAITING, metric_names.KV_CACHE_USAGE)


def _duration(value: str | None) -> str | None:
    if value is not None and not DURATION.match(value):
        raise ValueError(f"not a Prometheus duration: {value!r}")
    return value


def _labels(value: dict[str, str]) -> dict[str, str]:
    bad = [name for name in value if not LABEL_NAME.match(name)]
    if bad:
        raise ValueError(f"invalid label names {bad}")
    return value


class Rule(BaseModel):
    """One rule as Prometheus' rulefmt accepts it: an alert or a recording rule, nothing else."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    alert: str | None = None
    record: str | None = None
    expr: str = Field(min_length=1)
    for_: str | None = Field(default=None, alias="for")
    keep_firing_for: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}

    _check_for = field_validator("for_", "keep_firing_for")(_duration)
    _check_labels = field_validator("labels", "annotations")(_labels)

    @model_validator(mode="after")
    def _one_kind(self) -> Rule:
        if (self.alert is None) == (self.record is None):
            raise ValueError("a rule is exactly one of alert or record")
        if self.record is not None and (self.for_ or self.keep_firing_for or self.annotations):
            raise ValueError("for, keep_firing_for and annotations are for alerting rules only")
        if self.record is not None and not METRIC_NAME.match(self.record):
            raise ValueError(f"invalid recording rule name {self.record!r}")
        return self


class Group(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    interval: str | None = None
    query_offset: str | None = None
    limit: int | None = None
    labels: dict[str, str] = {}
    rules: list[Rule] = Field(min_length=1)

    _check_interval = field_validator("interval", "query_offset")(_duration)


class RuleFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    groups: list[Group] = Field(min_length=1)


def metrics_in(expr: str) -> set[str]:
    """Every metric name an expression selects (by name, or by a `__name__="..."` matcher)."""
    found: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                found.add(node.name)
            for matcher in node.matchers.matchers:
                if matcher.name == "__name__":
                    assert matcher.op == promql_parser.MatchOp.Equal, f"a metric name pattern in {expr!r}"
                    found.add(matcher.value)

    promql_parser.walk(promql_parser.parse(expr), pre_visit=visit)
    return found


def exposed(name: str, kind: str) -> set[str]:
    return {name + suffix for suffix in SUFFIXES[kind]}


def known_metrics() -> set[str]:
    """What the gateway's registry exposes (collected now), the other parts' declared names, the worker's gauges."""
    names: set[str] = set()
    for family in GatewayMetrics().registry.collect():
        names |= exposed(family.name, family.type)
    for name, kind in metric_names.PEER_METRICS.items():
        names |= exposed(name, kind)
    return names | set(WORKER_GAUGES)


def load_rules() -> RuleFile:
    return RuleFile.model_validate(yaml.safe_load(RULES.read_text(encoding="utf-8")))


def test_the_rule_file_has_prometheus_rule_file_semantics() -> None:
    rules = load_rules()
    groups = [g.name for g in rules.groups]
    assert len(groups) == len(set(groups)), "group names must be unique"
    seen = set()
    for group in rules.groups:
        for rule in group.rules:
            assert rule.alert is not None and LABEL_NAME.match(rule.alert)
            key = (rule.alert, tuple(sorted(rule.labels.items())))
            assert key not in seen, f"duplicate alert {key}"  # promtool's lint refuses these
            seen.add(key)
            assert rule.annotations.get("summary"), f"{rule.alert} has no summary"
            assert rule.labels.get("severity") in ("page", "ticket")


def test_every_metric_a_rule_uses_exists() -> None:
    known = known_metrics()
    used = {name for g in load_rules().groups for r in g.rules for name in metrics_in(r.expr)}
    assert used, "no metric found in the rules"
    assert used <= known, f"rules use metrics nobody exposes: {sorted(used - known)}"


def test_the_checker_refuses_what_is_not_there() -> None:
    """The checks above can fail: an unknown metric, a bad expression, a rule that is neither kind."""
    assert "fleetchat_gateway_no_such_total" not in known_metrics()
    assert metrics_in('rate({__name__="fleetchat_x_total"}[1m])') == {"fleetchat_x_total"}
    with pytest.raises(ValueError):
        promql_parser.parse("sum(rate(x[5m])")
    with pytest.raises(ValueError):
        Rule.model_validate({"expr": "up == 0"})
    with pytest.raises(ValueError):
        Rule.model_validate({"alert": "A", "expr": "up == 0", "for": "5 minutes"})
    with pytest.raises(ValueError):
        RuleFile.model_validate({"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up", "severity": 1}]}]})


@pytest.mark.parametrize(("slo", "field"), [("ttft", "ttft_p95_s"), ("inter_token", "inter_token_p95_s")])
def test_latency_alerts_use_the_tier_table_slos(slo: str, field: str) -> None:
    rules = [r for g in load_rules().groups for r in g.rules if r.labels.get("slo") == slo]
    by_tier = {r.labels["tier"]: r for r in rules}
    assert set(by_tier) == {tier.value for tier in tables().tiers}, f"one {slo} alert per tier"
    for tier, policy in tables().tiers.items():
        expr = promql_parser.parse(by_tier[tier.value].expr)
        assert isinstance(expr, promql_parser.BinaryExpr) and isinstance(expr.rhs, promql_parser.NumberLiteral)
        assert expr.rhs.val == getattr(policy.slo, field), f"{tier.value} {slo} threshold is not the tier's SLO"
        assert f'tier="{tier.value}"' in by_tier[tier.value].expr


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fleetchat_dashboard_build", ROOT / "ops" / "grafana" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _panel_exprs(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_the_dashboard_is_what_its_builder_makes() -> None:
    committed = DASHBOARD.read_text(encoding="utf-8")
    assert committed == _builder().render(), (
        "ops/grafana/fleetchat.json is stale: PYTHONPATH=. python ops/grafana/build.py"
    )


def test_every_dashboard_query_parses_and_uses_existing_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = _panel_exprs(dashboard)
    assert exprs
    known = known_metrics()
    used: set[str] = set()
    for expr in exprs:
        used |= metrics_in(expr.replace("$__rate_interval", "5m"))  # Grafana's variable, as Prometheus would see it
    assert used <= known, f"panels use metrics nobody exposes: {sorted(used - known)}"
    titles = [p["title"] for p in dashboard["panels"]]
    for tier in tables().tiers:
        for what in ("time to first token", "inter-token latency", "goodput"):
            assert f"{tier.value}: {what}" in titles
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for wanted in ("status", "Queue depth", "Brownout", "Breaker", "Spend rate"):
        assert any(wanted in t for t in titles), wanted


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("FLEETCHAT_REQUIRE_PROMTOOL") == "1":
            pytest.fail("promtool is required (FLEETCHAT_REQUIRE_PROMTOOL=1) but not installed")
        pytest.skip("promtool is not installed (apt-get install prometheus); .ci/run installs it")
    return found


def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    promtool = _promtool()
    checked = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([promtool, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, timeout=120)
    assert tested.returncode == 0, tested.stdout + tested.stderr

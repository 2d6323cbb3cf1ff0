"""A run's results in the Prometheus text format (textfile-collector style), written beside the report."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from functions.offline.evals.results import EvalRun


def render_prometheus(run: EvalRun) -> str:
    """`fleetchat_eval_metric{suite,metric}` per metric, and per suite whether it errored; the run's verdict and time.

    A fresh registry per call: nothing global, and the gateway's own registry is never touched.
    """
    registry = CollectorRegistry()
    value = Gauge(
        "fleetchat_eval_metric", "An eval metric of the latest run.", ["suite", "metric", "unit"], registry=registry
    )
    errored = Gauge("fleetchat_eval_suite_error", "1 if the suite could not run.", ["suite"], registry=registry)
    passed = Gauge("fleetchat_eval_passed", "1 if the latest run passed its gate.", registry=registry)
    regressions = Gauge("fleetchat_eval_findings", "Gate findings of the latest run.", ["kind"], registry=registry)
    finished = Gauge("fleetchat_eval_finished_timestamp_seconds", "When the latest run finished.", registry=registry)
    for suite in run.suites:
        errored.labels(suite.suite).set(1 if suite.error else 0)
        for metric in suite.metrics:
            value.labels(suite.suite, metric.name, metric.unit).set(metric.value)
    if run.gate is not None:
        passed.set(1 if run.gate.passed else 0)
        for kind in ("threshold", "regression", "suite_error"):
            regressions.labels(kind).set(sum(1 for f in run.gate.findings if f.kind == kind))
    if run.finished_at is not None:
        finished.set(run.finished_at.timestamp())
    return generate_latest(registry).decode()

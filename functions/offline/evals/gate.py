"""The regression gate: a run fails on an absolute threshold broken, a metric worse than the baseline of the same
model versions by more than its tolerance, or a suite that could not run."""

from __future__ import annotations

from functions.offline.evals.results import EvalRun, Finding, Gate

# Float noise in a stored value must not flip a metric that sits exactly at its tolerance.
EPSILON = 1e-9


def judge_run(run: EvalRun, baseline: EvalRun | None) -> Gate:
    """The gate's verdict on `run`; `baseline` must have the same model versions (else it is ignored)."""
    if baseline is not None and baseline.version_key != run.version_key:
        baseline = None
    findings: list[Finding] = []
    compared = 0
    base_metrics = {} if baseline is None else baseline.metrics()
    for suite in run.suites:
        if suite.error:
            findings.append(Finding(kind="suite_error", suite=suite.suite, message=f"{suite.suite}: {suite.error}"))
        for metric in suite.metrics:
            if metric.breaks_threshold():
                bound = "at least" if metric.direction == "higher" else "at most"
                findings.append(
                    Finding(
                        kind="threshold",
                        suite=suite.suite,
                        metric=metric.name,
                        value=metric.value,
                        limit=metric.threshold,
                        message=f"{metric.name} = {metric.value:.4g}, must be {bound} {metric.threshold:.4g}",
                    )
                )
            prior = base_metrics.get(metric.name)
            if prior is None or metric.tolerance is None:
                continue
            compared += 1
            worse = metric.worsening(prior.value)
            if worse > metric.tolerance + EPSILON:
                limit = (
                    prior.value - metric.tolerance if metric.direction == "higher" else prior.value + metric.tolerance
                )
                findings.append(
                    Finding(
                        kind="regression",
                        suite=suite.suite,
                        metric=metric.name,
                        value=metric.value,
                        baseline=prior.value,
                        limit=limit,
                        message=(
                            f"{metric.name} = {metric.value:.4g} vs baseline {prior.value:.4g} "
                            f"(tolerance {metric.tolerance:.4g})"
                        ),
                    )
                )
    return Gate(
        passed=not findings,
        baseline_run_id=None if baseline is None else baseline.run_id,
        findings=findings,
        compared=compared,
    )

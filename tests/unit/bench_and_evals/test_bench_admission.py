"""Fast tests for the benchmark's admission phase: the in-process cost part, its checks and its report section.

The two-replica part starts gateway processes and a model worker, so it is exercised by the benchmark only.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import Progress

from functions.offline.bench.phases.admission_phase import NOT_SENT, admission_cost_phase, summarize_burst
from functions.offline.bench.results.records import (
    AdmissionCostStats,
    AdmissionLimitStats,
    AdmissionReplicaStats,
    AdmissionStats,
    BenchResult,
)
from functions.offline.bench.results.report import render_markdown
from functions.offline.bench.results.targets import ADMISSION_P50_MAX_MS, evaluate


def _quiet_progress() -> Progress:
    return Progress(console=Console(quiet=True))


def _result(admission: AdmissionStats) -> BenchResult:
    return BenchResult(
        started_at="2025-01-01T00:00:00+00:00",
        finished_at="2025-01-01T00:01:00+00:00",
        duration_s=60.0,
        config={"model": "mini", "quick": True},
        machine={},
        target_url="http://127.0.0.1:8000",
        worker_url=None,
        started_stack=False,
        admission=admission,
    )


def _limit(accepted: list[int], limit_rpm: int = 10, sent: int | None = None) -> AdmissionLimitStats:
    sent = 3 * limit_rpm if sent is None else sent
    replicas = [
        AdmissionReplicaStats(
            replica=f"http://127.0.0.1:900{i}", sent=sent // 2, accepted=a, refused=sent // 2 - a, other=0
        )
        for i, a in enumerate(accepted)
    ]
    return AdmissionLimitStats(
        limit_rpm=limit_rpm,
        concurrency=8,
        planned=3 * limit_rpm,
        sent=sent,
        accepted=sum(accepted),
        refused=sent - sum(accepted),
        replicas=replicas,
        wall_s=1.5,
    )


def test_cost_phase_times_every_request_on_a_fresh_sqlite_file() -> None:
    progress = _quiet_progress()
    cost = admission_cost_phase(30, progress)
    assert cost.requests == 30 and cost.store.startswith("sqlite")
    for value in (cost.p50_ms, cost.p99_ms, cost.max_ms, cost.admit_p50_ms, cost.settle_p50_ms, cost.ledger_p50_ms):
        assert value is not None and value > 0
    assert cost.p50_ms <= cost.p99_ms <= cost.max_ms  # type: ignore[operator]
    [task] = progress.tasks
    assert task.completed == task.total == 30


def test_targets_check_the_cost_and_that_the_replicas_admit_exactly_the_limit() -> None:
    cost = AdmissionCostStats(
        store="sqlite",
        requests=30,
        p50_ms=1.2,
        p99_ms=3.0,
        max_ms=4.0,
        admit_p50_ms=0.5,
        settle_p50_ms=0.4,
        ledger_p50_ms=0.3,
    )
    checks = {c.name: c for c in evaluate(_result(AdmissionStats(cost=cost, limit=_limit([6, 4]))))}
    assert checks["admission + ledger write p50 (sqlite)"].passed is True
    assert checks["admission + ledger write p50 (sqlite)"].target == f"<= {ADMISSION_P50_MAX_MS:g} ms"
    exact = checks["2 replicas, 1 store: accepted in the window (limit 10 RPM)"]
    assert exact.passed is True and exact.value == 10 and exact.target == "== 10"

    slow = cost.model_copy(update={"p50_ms": 2.5})
    checks = {c.name: c for c in evaluate(_result(AdmissionStats(cost=slow, limit=_limit([6, 5]))))}
    assert checks["admission + ledger write p50 (sqlite)"].passed is False
    assert checks["2 replicas, 1 store: accepted in the window (limit 10 RPM)"].passed is False  # 11: one too many

    # Fewer requests than the limit went out before the window ended: the limit was never reached, nothing to check.
    short = evaluate(_result(AdmissionStats(limit=_limit([4, 4], sent=8))))
    [check] = [c for c in short if c.name.startswith("2 replicas")]
    assert check.passed is None and check.value == 8
    assert not any(c.name.startswith("admission + ledger") for c in short)


def test_report_has_an_admission_control_section() -> None:
    cost = AdmissionCostStats(
        store="sqlite (WAL, synchronous=FULL)",
        requests=30,
        p50_ms=1.25,
        p99_ms=3.0,
        max_ms=4.0,
        admit_p50_ms=0.5,
        settle_p50_ms=0.4,
        ledger_p50_ms=0.3,
    )
    limit = _limit([5, 5], sent=28).model_copy(update={"other": {"503": 1}})
    result = _result(AdmissionStats(cost=cost, limit=limit))
    result.checks = evaluate(result)
    markdown = render_markdown(result)
    assert "## Admission control" in markdown
    assert "| sqlite (WAL, synchronous=FULL) | 30 | 1.25 |" in markdown
    assert "| **total** | 28 | **10** | 18 | 1 |" in markdown
    assert "(2 of 30 not sent: the window was ending)" in markdown
    assert "`503` x1" in markdown
    assert BenchResult.model_validate_json(result.model_dump_json()) == result


def test_burst_outcomes_are_counted_per_replica_and_unsent_requests_left_out() -> None:
    outcomes = [(0, "200"), (1, "200"), (0, "429"), (1, "429"), (0, "503"), (1, "ReadTimeout"), (0, NOT_SENT)]
    limit = summarize_burst(2, ["http://a", "http://b"], outcomes, 1.23456)
    assert (limit.planned, limit.sent, limit.accepted, limit.refused) == (7, 6, 2, 2)
    assert limit.other == {"503": 1, "ReadTimeout": 1}
    assert [(r.sent, r.accepted, r.refused, r.other) for r in limit.replicas] == [(3, 1, 1, 1), (3, 1, 1, 1)]
    assert limit.wall_s == 1.235

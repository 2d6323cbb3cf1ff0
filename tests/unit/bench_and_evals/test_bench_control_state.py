"""The control-state bench phase on both engines (a temp SQLite file, Debian's redis-server): every event of every
simulated answer is timed and counted, the report renders it, and the SQLite first-event wait is a target."""

from __future__ import annotations

from rich.progress import Progress

from functions.offline.bench.phases.control_state_phase import control_state_phase
from functions.offline.bench.results.report import render_markdown
from functions.offline.bench.results.targets import evaluate
from tests.support.redis_server import require_redis
from tests.unit.bench_and_evals.test_bench_stats import sample_result


async def test_both_engines_are_timed_and_every_request_counted() -> None:
    require_redis()
    with Progress(disable=True) as progress:
        measured, notes = await control_state_phase(3, 20, 0.001, progress)
    assert notes == [] and [m.engine for m in measured] == ["sqlite", "redis"]
    for engine in measured:
        assert engine.first_event_p50_ms is not None and engine.event_p50_ms is not None
        # At least the open, the first write, the end and the live-list entry and its removal; at most one
        # request per event on top of those.
        assert 4 <= engine.requests_per_answer <= 20 + 4
    result = sample_result()
    result.control_state = measured
    assert "## Shared control state" in render_markdown(result)
    checks = {c.name: c for c in evaluate(result)}
    assert checks["shared state: first event's wait p50 (sqlite)"].value == measured[0].first_event_p50_ms

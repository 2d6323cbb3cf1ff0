"""The relay CPU phase's record: CPU per 1,000 tokens, the on/off ratio, the report section; and the operator switch
it measures (`FLEETCHAT_SAFETY_OUTPUT_CHECK=false` leaves the post-filter without the learned output check)."""

from __future__ import annotations

import pytest

from functions.offline.bench.results.relay_cpu_results import RelayCpuRun, RelayCpuStats, relay_cpu_lines
from shared.settings import Settings


def stats(on_cpu_s: float, off_cpu_s: float, tokens: int = 2000) -> RelayCpuStats:
    runs = [
        RelayCpuRun(variant="output check on", requests=16, tokens=tokens, cpu_s=on_cpu_s, wall_s=20.0),
        RelayCpuRun(variant="output check off", requests=16, tokens=tokens, cpu_s=off_cpu_s, wall_s=20.0),
    ]
    return RelayCpuStats(model="mini", concurrency=4, max_tokens=128, rounds=2, runs=runs)


def test_cpu_per_thousand_tokens_and_the_ratio_between_the_variants() -> None:
    result = stats(on_cpu_s=2.4, off_cpu_s=2.0)
    on = result.run("output check on")
    assert on is not None and on.cpu_ms_per_1k_tokens == pytest.approx(1200.0)
    assert on.cpu_share == pytest.approx(0.12)
    assert result.check_ratio == pytest.approx(1.2)
    text = "\n".join(relay_cpu_lines(result))
    assert "| output check on | 16 (0) | 2,000 | 2.40 | 1,200 | 0.12 |" in text
    assert "1.20x the CPU per token" in text


def test_no_tokens_no_ratio() -> None:
    result = stats(on_cpu_s=1.0, off_cpu_s=1.0, tokens=0)
    assert result.check_ratio is None
    assert "x the CPU per token" not in "\n".join(relay_cpu_lines(result))


def test_the_output_check_is_on_unless_the_operator_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().guard.output_check is True
    monkeypatch.setenv("FLEETCHAT_SAFETY_OUTPUT_CHECK", "false")
    assert Settings().guard.output_check is False

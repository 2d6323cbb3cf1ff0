"""The long-conversation phase's record: turns answered, the steps where the cut moved, the cached ratios (all turns
after the first, and between steps), the report section and its target."""

from __future__ import annotations

import pytest

from functions.offline.bench.results.long_conversation_results import (
    LongConversationStats,
    LongTurn,
    long_conversation_lines,
)
from functions.offline.bench.results.records import BenchResult
from functions.offline.bench.results.targets import evaluate


def stats(error_at: int | None = None) -> LongConversationStats:
    turns = []
    for n in range(1, 7):
        out = 0 if n < 4 else 6  # the cut moved at turn 4
        cached = 0 if n in (1, 4) else 90
        turns.append(LongTurn(turn=n, prompt_tokens=100, cached_tokens=cached, out_of_context=out,
                              error="boom" if n == error_at else None))  # fmt: skip
    return LongConversationStats(model="mini", context_tokens=8192, turns=turns)


def test_steps_and_ratios() -> None:
    result = stats()
    assert result.answered == 6 and result.steps == [4]
    assert result.cached_ratio == pytest.approx(360 / 500)
    assert result.cached_ratio_between_steps == pytest.approx(0.9)
    text = "\n".join(long_conversation_lines(result))
    assert "| 6 of 6 | 4 | 100 | 72.0 % | 90.0 % |" in text


def test_every_turn_must_be_answered() -> None:
    check = next(c for c in evaluate(BenchResult.model_construct(long_conversation=stats(error_at=5)))
                 if c.name.startswith("long conversation"))  # fmt: skip
    assert check.passed is False and check.value == 5
    ok = next(c for c in evaluate(BenchResult.model_construct(long_conversation=stats()))
              if c.name.startswith("long conversation"))  # fmt: skip
    assert ok.passed is True

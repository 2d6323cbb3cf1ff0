"""The shadow judge's parts that need no server: rolling windows and the alert rule, the call budget, and what of a
conversation is shown to the judge; the fleet's budget shared by gateway replicas."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from functions.judging.budget import CallBudget, FleetCallBudget
from functions.judging.rolling import RollingScores
from functions.judging.shadow import MAX_TURN_CHARS, question_of
from functions.judging.verdict import JudgeScores
from shared.storage.redis_control_state import RedisControlState
from shared.storage.sqlite.control_state import SQLiteControlState
from shared.wire.schemas import ChatMessage
from tests.support.processes import free_port


def scores(h: int, a: int, f: int) -> JudgeScores:
    return JudgeScores(helpfulness=h, accuracy=a, format=f)


def test_the_alert_needs_the_delta_and_enough_scores_in_both_pools() -> None:
    rolling = RollingScores(candidate="mini", reference="flagship", window=4, threshold=0.5, min_samples=2)
    assert math.isnan(rolling.status().delta) and not rolling.status().alert
    rolling.add("mini", scores(5, 1, 5))  # overall 11/3
    rolling.add("flagship", scores(5, 5, 5))
    status = rolling.status()
    assert status.delta == pytest.approx(5 - 11 / 3) and (status.candidate_n, status.reference_n) == (1, 1)
    assert not status.alert  # one score each is not enough
    rolling.add("mini", scores(5, 1, 5))
    rolling.add("flagship", scores(5, 5, 5))
    assert rolling.status().alert
    assert rolling.means("mini") == {"overall": 11 / 3, "helpfulness": 5, "accuracy": 1, "format": 5}


def test_the_window_forgets_old_scores_and_the_alert_clears() -> None:
    rolling = RollingScores(candidate="mini", reference="flagship", window=2, threshold=0.5, min_samples=2)
    for _ in range(2):
        rolling.add("mini", scores(2, 2, 2))
        rolling.add("flagship", scores(5, 5, 5))
    assert rolling.status().alert and rolling.status().delta == 3
    for _ in range(2):  # mini recovers: the window now holds only the new scores
        rolling.add("mini", scores(5, 5, 4))
    status = rolling.status()
    assert rolling.count("mini") == 2 and status.delta == pytest.approx(1 / 3) and not status.alert


def test_the_budget_allows_a_burst_then_refills_at_its_rate() -> None:
    now = [100.0]
    budget = CallBudget(3, clock=lambda: now[0])
    assert [budget.try_take() for _ in range(4)] == [True, True, True, False]
    now[0] += 10  # 3 a minute: one call back every 20 s
    assert not budget.try_take()
    now[0] += 10
    assert budget.try_take() and not budget.try_take()
    now[0] += 3600  # never more than the burst
    assert [budget.try_take() for _ in range(4)] == [True, True, True, False]


def test_the_judge_sees_the_last_ask_with_a_little_context() -> None:
    alone = [ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="What is 2+2?")]
    assert question_of(alone) == "What is 2+2?"
    long_turn = "x" * (MAX_TURN_CHARS + 50)
    chat = [
        ChatMessage(role="system", content="Be brief."),
        *[ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"turn {i}") for i in range(8)],
        ChatMessage(role="user", content=long_turn),
    ]
    question = question_of(chat)
    assert question.startswith("user: turn 4\n\nassistant: turn 5") and "Be brief" not in question
    assert question.endswith("x [...]") and "turn 3" not in question
    assert question_of([ChatMessage(role="system", content="only a system prompt")]) == ""


def test_turns_are_redacted_before_they_are_clipped() -> None:
    # A secret straddling the clip point: clipped first, half of it would survive where no redactor could see it.
    text = "x" * (MAX_TURN_CHARS - 4) + " SECRET-TOKEN-123 tail"
    question = question_of([ChatMessage(role="user", content=text)], lambda t: t.replace("SECRET-TOKEN-123", "[S]"))
    assert "SECRET" not in question and "[S]" in question


async def test_the_fleet_budget_is_one_bucket_for_every_gateway_and_a_dead_store_spends_nothing(
    tmp_path: Path,
) -> None:
    replicas = [FleetCallBudget(SQLiteControlState(tmp_path / "control.db"), per_minute=3) for _ in range(3)]
    taken = [await budget.take() for budget in replicas for _ in range(2)]
    assert sum(taken) == 3  # not 3 per gateway
    unreachable = FleetCallBudget(RedisControlState(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2), 3)
    assert await unreachable.take() is False

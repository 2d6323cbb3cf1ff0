"""Admission on a real SQLite store: the completion budget, brownout, reservation and settlement, headers."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from functions.control.admission import Admission, estimate_prompt_tokens
from shared.errors import InvalidRequestError, QuotaExceededError
from shared.fleet.tables import limits_for
from shared.fleet.tiers import LimitOverrides, Tier
from shared.storage.sqlite.limits import SQLiteRateLimits
from shared.wire.schemas import ChatMessage

NOW = datetime(2026, 11, 22, 10, 0, 5, tzinfo=UTC)
SHORT = [ChatMessage(role="user", content="hello there")]


@pytest.fixture
def admission(tmp_path: Path) -> Admission:
    return Admission(SQLiteRateLimits(tmp_path / "db.sqlite"), {"mini": 8192})


def test_the_budget_is_the_tiers_unless_the_client_asks_for_less(admission: Admission) -> None:
    plus = limits_for(Tier.PLUS)
    assert admission.admit("t", "k", plus, SHORT, None, "mini", NOW).max_tokens == plus.max_output_tokens
    assert admission.admit("t", "k", plus, SHORT, 50, "mini", NOW).max_tokens == 50
    with pytest.raises(InvalidRequestError, match="at most 4096"):
        admission.admit("t", "k", plus, SHORT, 5000, "mini", NOW)


def test_a_long_prompt_leaves_the_budget_to_the_worker(admission: Admission) -> None:
    long = [ChatMessage(role="user", content="word " * 1000)]  # 5,000 bytes: up to 5,000 tokens
    reservation = admission.admit("t", "k", limits_for(Tier.PLUS), long, None, "mini", NOW)
    assert reservation.max_tokens is None  # 5,000 + 4,096 might not fit 8,192: not sent, the worker bounds it
    assert reservation.reserved_tokens == estimate_prompt_tokens(long) + 4096


def test_brownout_caps_the_budget_and_says_so(admission: Admission) -> None:
    admission.brownout = lambda pool: pool == "mini"
    free = limits_for(Tier.FREE)
    capped = admission.admit("t", "k", free, SHORT, None, "mini", NOW)
    assert capped.max_tokens == free.brownout_max_output_tokens and capped.brownout
    small = admission.admit("t", "k", free, SHORT, 10, "mini", NOW)
    assert small.max_tokens == 10 and not small.brownout
    other_pool = admission.admit("t", "k", free, SHORT, None, "flagship", NOW)  # brownout is per pool
    assert other_pool.reserved_tokens == estimate_prompt_tokens(SHORT) + free.max_output_tokens
    assert not other_pool.brownout


def test_settlement_returns_the_unused_reservation(admission: Admission) -> None:
    limits = limits_for(Tier.PLUS, LimitOverrides(key_tpm=1000, tenant_tpm=1000))
    first = admission.admit("t", "k", limits, SHORT, 400, "mini", NOW)
    assert int(first.headers["x-ratelimit-remaining-tokens"]) == 1000 - first.reserved_tokens
    admission.settle(first, used_tokens=30)
    second = admission.admit("t", "k", limits, SHORT, 400, "mini", NOW)
    assert int(second.headers["x-ratelimit-remaining-tokens"]) == 1000 - 30 - second.reserved_tokens
    assert second.headers["x-ratelimit-reset-tokens"] == "55s"  # the window ends at 10:01:00


def test_a_request_bigger_than_the_budget_is_a_hard_refusal(admission: Admission) -> None:
    limits = limits_for(Tier.PLUS, LimitOverrides(key_tpm=100))
    with pytest.raises(QuotaExceededError) as info:
        admission.admit("t", "k", limits, SHORT, 200, "mini", NOW)
    assert info.value.code == "request_too_large" and info.value.headers["x-should-retry"] == "false"

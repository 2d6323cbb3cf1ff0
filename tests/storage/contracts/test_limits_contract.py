"""The admission-counter contract, against SQLite and DynamoDB (moto): all-or-nothing charges that hold across
store instances (one per gateway replica), settlement, and the rolling message log."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from shared.settings import Settings
from shared.storage import factory
from shared.storage.limits import RateLimitStore, WindowCharge

WINDOW = 1_800_000_000 - 1_800_000_000 % 60


def _charge(
    scope: str,
    *,
    requests: int = 1,
    tokens: int = 10,
    max_requests: int = 5,
    max_tokens: int = 1000,
    window_start: int = WINDOW,
) -> WindowCharge:
    return WindowCharge(
        scope=scope,
        window_start=window_start,
        window_s=60,
        requests=requests,
        tokens=tokens,
        max_requests=max_requests,
        max_tokens=max_tokens,
    )


def test_charges_until_the_limit_then_refuses_without_changing_anything(rate_limits: RateLimitStore) -> None:
    for i in range(5):
        outcome = rate_limits.charge([_charge("key:a"), _charge("tenant:t", max_requests=100)])
        assert outcome.admitted
        assert [c.requests for c in outcome.counts] == [i + 1, i + 1]
    refused = rate_limits.charge([_charge("key:a"), _charge("tenant:t", max_requests=100)])
    assert not refused.admitted and refused.refused_scope == "key:a" and refused.refused_by == "requests"
    assert [c.requests for c in refused.counts] == [5, 5]  # every window, as found
    # Another key of the same tenant still gets in, and the tenant counter did not count the refusal.
    other = rate_limits.charge([_charge("key:b"), _charge("tenant:t", max_requests=100)])
    assert other.admitted and [c.requests for c in other.counts] == [1, 6]


def test_a_refusal_on_the_second_scope_leaves_the_first_untouched(rate_limits: RateLimitStore) -> None:
    assert rate_limits.charge([_charge("key:a", tokens=600), _charge("tenant:t", tokens=600)]).admitted
    refused = rate_limits.charge([_charge("key:c", tokens=500), _charge("tenant:t", tokens=500)])
    assert not refused.admitted and refused.refused_scope == "tenant:t" and refused.refused_by == "tokens"
    assert [(c.scope, c.tokens) for c in refused.counts] == [("key:c", 0), ("tenant:t", 600)]
    fresh = rate_limits.charge([_charge("key:c", tokens=400), _charge("tenant:t", tokens=400)])
    assert fresh.admitted and [c.tokens for c in fresh.counts] == [400, 1000]


def test_windows_are_independent(rate_limits: RateLimitStore) -> None:
    for _ in range(5):
        assert rate_limits.charge([_charge("key:a")]).admitted
    assert not rate_limits.charge([_charge("key:a")]).admitted
    assert rate_limits.charge([_charge("key:a", window_start=WINDOW + 60)]).admitted


def test_settle_corrects_tokens_and_never_goes_negative(rate_limits: RateLimitStore) -> None:
    rate_limits.charge([_charge("key:a", tokens=900)])
    rate_limits.settle("key:a", WINDOW, -850)  # the answer was much shorter than max_tokens
    outcome = rate_limits.charge([_charge("key:a", tokens=900)])
    assert outcome.admitted and outcome.counts[0].tokens == 950
    rate_limits.settle("key:a", WINDOW, -5000)
    assert rate_limits.charge([_charge("key:a", tokens=0)]).counts[0].tokens == 0
    rate_limits.settle("key:none", WINDOW, 10)  # a window that is gone: nothing to correct, no error


def test_a_request_larger_than_the_whole_budget_is_refused(rate_limits: RateLimitStore) -> None:
    refused = rate_limits.charge([_charge("key:a", tokens=1001)])
    assert not refused.admitted and refused.refused_by == "tokens"


def test_concurrent_replicas_admit_exactly_the_limit(accounts_settings: Settings) -> None:
    """Four store instances (four gateway replicas) race 40 requests at a limit of 12: exactly 12 get in."""
    stores = [factory.open_rate_limits(accounts_settings) for _ in range(4)]
    start = threading.Barrier(8)

    def attempt(i: int) -> bool:
        if i < 8:
            start.wait()
        store = stores[i % len(stores)]
        return store.charge([_charge("key:race", max_requests=12), _charge("tenant:race", max_requests=1000)]).admitted

    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            admitted = sum(pool.map(attempt, range(40)))
        final = stores[0].charge([_charge("key:race", requests=0, tokens=0, max_requests=12)])
    finally:
        for store in stores:
            store.close()
    assert admitted == 12
    assert final.counts[0].requests == 12 and final.counts[0].tokens == 120


def test_message_cap_is_a_rolling_window(rate_limits: RateLimitStore) -> None:
    t0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    window = 3 * 3600
    for i in range(3):
        outcome = rate_limits.record_message("tenant:f", t0 + timedelta(minutes=i), window, cap=3)
        assert outcome.admitted and outcome.used == i + 1
    refused = rate_limits.record_message("tenant:f", t0 + timedelta(hours=2), window, cap=3)
    assert not refused.admitted and refused.used == 3 and refused.oldest_at == t0
    # Another subject is unaffected.
    assert rate_limits.record_message("tenant:g", t0 + timedelta(hours=2), window, cap=3).admitted
    # Three hours after the first message its slot frees (and only that one).
    later = t0 + timedelta(hours=3, seconds=1)
    assert rate_limits.record_message("tenant:f", later, window, cap=3).admitted
    again = rate_limits.record_message("tenant:f", later, window, cap=3)
    assert not again.admitted and again.oldest_at == t0 + timedelta(minutes=1)


def test_forget_message_frees_its_slot(rate_limits: RateLimitStore) -> None:
    t0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    assert rate_limits.record_message("tenant:f", t0, 3600, cap=1).admitted
    assert not rate_limits.record_message("tenant:f", t0 + timedelta(seconds=1), 3600, cap=1).admitted
    rate_limits.forget_message("tenant:f", t0)
    assert rate_limits.record_message("tenant:f", t0 + timedelta(seconds=2), 3600, cap=1).admitted


def test_concurrent_messages_never_pass_the_cap(accounts_settings: Settings) -> None:
    stores = [factory.open_rate_limits(accounts_settings) for _ in range(3)]
    now = datetime.now(UTC)

    def attempt(i: int) -> bool:
        at = now + timedelta(milliseconds=i)
        return stores[i % 3].record_message("tenant:burst", at, 3600, cap=5).admitted

    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            admitted = sum(pool.map(attempt, range(18)))
    finally:
        for store in stores:
            store.close()
    assert admitted == 5

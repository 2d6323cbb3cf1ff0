"""Window arithmetic, meter values and the deterministic identifier."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from functions.metering.meters import (
    IDENTIFIER_MAX_LEN,
    Meter,
    Window,
    align_down,
    align_up,
    closed_until,
    count_windows,
    exportable_from,
    identifier,
    meters_from_settings,
    window_at,
    windows,
)
from shared.settings import Settings
from shared.storage.ledger import TenantTotals

T = datetime(2026, 3, 9, 14, 37, 12, 500, tzinfo=UTC)
INPUT, CACHED, OUTPUT, EMBEDDING, *BATCH = meters_from_settings(Settings())  # issue 22: + embedding; 48: batch


def test_windows_align_to_the_epoch() -> None:
    assert align_down(T, 3600) == datetime(2026, 3, 9, 14, tzinfo=UTC)
    assert align_up(T, 3600) == datetime(2026, 3, 9, 15, tzinfo=UTC)
    assert align_up(datetime(2026, 3, 9, 15, tzinfo=UTC), 3600) == datetime(2026, 3, 9, 15, tzinfo=UTC)
    assert align_down(T, 900) == datetime(2026, 3, 9, 14, 30, tzinfo=UTC)
    assert window_at(T, 3600) == Window(datetime(2026, 3, 9, 14, tzinfo=UTC), datetime(2026, 3, 9, 15, tzinfo=UTC))
    with pytest.raises(ValueError):
        align_down(T.replace(tzinfo=None), 3600)


def test_windows_cover_a_range_half_open() -> None:
    start = datetime(2026, 3, 9, 10, 30, tzinfo=UTC)
    end = datetime(2026, 3, 9, 13, tzinfo=UTC)
    got = list(windows(start, end, 3600))
    assert [w.start.hour for w in got] == [10, 11, 12]
    assert all(w.end - w.start == timedelta(hours=1) for w in got)
    assert count_windows(start, end, 3600) == 3
    assert count_windows(end, end, 3600) == 0
    assert count_windows(end, start, 3600) == 0
    assert count_windows(start, end + timedelta(seconds=1), 3600) == 4


def test_a_window_is_exported_only_after_its_grace_period() -> None:
    # 14:04 with 5 minutes of grace: 13:00-14:00 closed only 4 minutes ago, so the last exportable one ends at 13:00.
    assert closed_until(datetime(2026, 3, 9, 14, 4, tzinfo=UTC), 3600, 300) == datetime(2026, 3, 9, 13, tzinfo=UTC)
    assert closed_until(datetime(2026, 3, 9, 14, 5, tzinfo=UTC), 3600, 300) == datetime(2026, 3, 9, 14, tzinfo=UTC)


def test_stripe_accepts_windows_from_35_days_back_with_a_margin() -> None:
    oldest = exportable_from(T, 3600)
    assert oldest == align_up(T - timedelta(days=35) + timedelta(hours=1), 3600)
    assert T - timedelta(days=35) < oldest <= T - timedelta(days=35) + timedelta(hours=2)


def test_meter_values_bill_cached_prompt_tokens_once() -> None:
    totals = TenantTotals(tenant_id="t", requests=2, prompt_tokens=120, completion_tokens=30, cached_tokens=50)
    assert (INPUT.value(totals), CACHED.value(totals), OUTPUT.value(totals)) == (70, 50, 30)
    odd = totals.model_copy(update={"cached_tokens": 500})  # never a negative input count
    assert INPUT.value(odd) == 0
    assert {m.event_name for m in (INPUT, CACHED, OUTPUT)} == {
        "fleetchat_input_tokens",
        "fleetchat_cached_input_tokens",
        "fleetchat_output_tokens",
    }


def test_identifier_is_deterministic_and_names_the_send() -> None:
    start = datetime(2026, 3, 9, 14, tzinfo=UTC)
    tenant = "ten_0123456789abcdef0123456789abcdef"
    first = identifier(tenant, CACHED, start, 0)
    assert first == f"fc-{tenant}-cin-20260309T1400Z-0"
    assert identifier(tenant, CACHED, start, 0) == first
    assert identifier(tenant, CACHED, start, 1).endswith("-1")
    others = {identifier(tenant, m, start, 0) for m in (INPUT, CACHED, OUTPUT)}
    others.add(identifier(tenant, INPUT, start + timedelta(hours=1), 0))
    others.add(identifier("ten_other", INPUT, start, 0))
    assert len(others) == 5
    assert identifier(tenant, INPUT, start + timedelta(seconds=30), 0).endswith("-in-20260309T140030Z-0")


def test_identifier_of_a_long_tenant_id_is_hashed_under_stripes_limit() -> None:
    start = datetime(2026, 3, 9, 14, tzinfo=UTC)
    long_a, long_b = "t" * 120, "t" * 119 + "u"
    a, b = identifier(long_a, OUTPUT, start, 12), identifier(long_b, OUTPUT, start, 12)
    assert len(a) <= IDENTIFIER_MAX_LEN and len(b) <= IDENTIFIER_MAX_LEN
    assert a != b and a == identifier(long_a, OUTPUT, start, 12)
    assert a.startswith("fc-h") and a.endswith("-out-20260309T1400Z-12")


def test_an_unknown_meter_key_is_refused() -> None:
    totals = TenantTotals(tenant_id="t", requests=1, prompt_tokens=1, completion_tokens=1, cached_tokens=0)
    with pytest.raises(ValueError):
        Meter(key="images", short="img", event_name="x").value(totals)

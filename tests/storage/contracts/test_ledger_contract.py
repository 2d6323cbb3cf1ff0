"""The ledger and meter-state contracts, against SQLite and DynamoDB (moto)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from shared.storage.ledger import LedgerEntry, LedgerStore, MeterSend, MeterStateStore, Outcome

T0 = datetime(2026, 11, 20, 23, 30, tzinfo=UTC)


def _entry(
    request_id: str, tenant: str = "ten_a", at: datetime = T0, model: str = "mini", **tokens: int
) -> LedgerEntry:
    return LedgerEntry(
        request_id=request_id,
        tenant_id=tenant,
        key_id="key_1",
        model=model,
        prompt_tokens=tokens.get("prompt", 100),
        completion_tokens=tokens.get("completion", 20),
        cached_tokens=tokens.get("cached", 0),
        outcome=Outcome.COMPLETED,
        created_at=at,
    )


def test_record_is_idempotent_by_request_id(ledger: LedgerStore) -> None:
    assert ledger.record(_entry("req_1"))
    assert not ledger.record(_entry("req_1"))
    assert not ledger.record(_entry("req_1", prompt=999, at=T0 + timedelta(hours=5)))  # a different body: ignored
    [row] = ledger.usage("ten_a", T0 - timedelta(days=1), T0 + timedelta(days=1))
    assert (row.requests, row.prompt_tokens, row.completion_tokens) == (1, 100, 20)


def test_usage_per_day_and_model_for_one_tenant(ledger: LedgerStore) -> None:
    ledger.record(_entry("r1", at=T0, cached=50))
    ledger.record(_entry("r2", at=T0 + timedelta(minutes=10), model="flagship"))
    ledger.record(_entry("r3", at=T0 + timedelta(hours=1), completion=5))  # the next UTC day
    ledger.record(_entry("r4", tenant="ten_b", at=T0))
    rows = ledger.usage("ten_a", T0 - timedelta(hours=1), T0 + timedelta(days=1))
    assert [(r.day, r.model, r.requests, r.completion_tokens, r.cached_tokens) for r in rows] == [
        (date(2026, 11, 20), "flagship", 1, 20, 0),
        (date(2026, 11, 20), "mini", 1, 20, 50),
        (date(2026, 11, 21), "mini", 1, 5, 0),
    ]
    assert ledger.usage("ten_a", T0 + timedelta(hours=2), T0 + timedelta(days=1)) == []


def test_totals_per_tenant_over_a_half_open_range(ledger: LedgerStore) -> None:
    start = datetime(2026, 11, 21, 10, tzinfo=UTC)
    ledger.record(_entry("early", at=start - timedelta(microseconds=1)))
    ledger.record(_entry("a1", at=start))
    ledger.record(_entry("a2", at=start + timedelta(minutes=59), prompt=1, completion=2, cached=1))
    ledger.record(_entry("b1", tenant="ten_b", at=start + timedelta(minutes=30)))
    ledger.record(_entry("late", at=start + timedelta(hours=1)))
    totals = ledger.totals(start, start + timedelta(hours=1))
    assert [(t.tenant_id, t.requests, t.prompt_tokens, t.completion_tokens, t.cached_tokens) for t in totals] == [
        ("ten_a", 2, 101, 22, 1),
        ("ten_b", 1, 100, 20, 0),
    ]


def _send(identifier: str, window: datetime, value: int = 10) -> MeterSend:
    return MeterSend(
        identifier=identifier,
        tenant_id="ten_a",
        customer_id="cus_A",
        meter="fleetchat_input_tokens",
        window_start=window,
        value=value,
    )


def test_outbox_pending_then_sent(meter_state: MeterStateStore) -> None:
    w1, w2 = datetime(2026, 11, 21, 10, tzinfo=UTC), datetime(2026, 11, 21, 11, tzinfo=UTC)
    assert meter_state.add_pending(_send("id-2", w2))
    assert meter_state.add_pending(_send("id-1", w1))
    assert not meter_state.add_pending(_send("id-1", w1, value=999))  # identifier taken: unchanged
    assert [s.identifier for s in meter_state.pending()] == ["id-1", "id-2"]
    sent_at = datetime(2026, 11, 21, 12, tzinfo=UTC)
    meter_state.mark_sent("id-1", sent_at)
    meter_state.mark_sent("id-1", sent_at + timedelta(hours=1))  # keeps the first confirmation
    assert [s.identifier for s in meter_state.pending()] == ["id-2"]
    [first] = meter_state.sends(w1, w2)
    assert (first.value, first.sent_at) == (10, sent_at)
    assert [s.identifier for s in meter_state.sends(w1, w2 + timedelta(hours=1))] == ["id-1", "id-2"]


def test_cursor(meter_state: MeterStateStore) -> None:
    assert meter_state.get_cursor() is None
    moment = datetime(2026, 11, 21, 10, tzinfo=UTC)
    meter_state.set_cursor(moment)
    meter_state.set_cursor(moment + timedelta(hours=1))
    assert meter_state.get_cursor() == moment + timedelta(hours=1)

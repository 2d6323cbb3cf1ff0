"""The safety audit contract, against SQLite and DynamoDB (moto): idempotent records, listing, the sweep, bad input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from shared.storage.safety_audit import (
    SafetyAction,
    SafetyAuditRecord,
    SafetyAuditStore,
    SafetyDetector,
    SafetyLayer,
)

T0 = datetime(2026, 11, 20, 23, 30, tzinfo=UTC)
DAY = timedelta(days=1)
EVERYTHING = (T0 - 1000 * DAY, T0 + 1000 * DAY)


def audit(
    request_id: str,
    tenant: str = "ten_a",
    at: datetime = T0,
    layer: SafetyLayer = SafetyLayer.PRE,
    expires_at: datetime | None = None,
    **fields: object,
) -> SafetyAuditRecord:
    values: dict[str, object] = {
        "request_id": request_id,
        "tenant_id": tenant,
        "key_id": "key_1",
        "at": at,
        "layer": layer,
        "detector": SafetyDetector.CLASSIFIER,
        "category": "illicit/violent",
        "score": 0.8731,
        "policy_version": "2026-11-01",
        "action": SafetyAction.BLOCKED if layer is SafetyLayer.PRE else SafetyAction.HALTED,
        "model": "mini",
        "expires_at": expires_at,
    }
    return SafetyAuditRecord(**{**values, **fields})  # type: ignore[arg-type]


def everything(store: SafetyAuditStore, tenant: str = "ten_a") -> list[SafetyAuditRecord]:
    return store.list_for_tenant(tenant, *EVERYTHING, limit=1000)


def never_held(_: str) -> bool:
    return False


def test_records_round_trip_every_field(safety_audit: SafetyAuditStore) -> None:
    full = audit("req_full", expires_at=T0 + 30 * DAY, content="how to [REDACTED] a …", score=0.1)
    bare = audit("req_bare", at=T0 + timedelta(microseconds=1), key_id=None, detector=SafetyDetector.PII,
                 category="EMAIL_ADDRESS", layer=SafetyLayer.POST, score=1.0)  # fmt: skip
    assert safety_audit.record(full) and safety_audit.record(bare)
    assert everything(safety_audit) == [bare, full]


def test_record_is_idempotent_by_request_and_layer(safety_audit: SafetyAuditStore) -> None:
    first = audit("req_1", expires_at=T0 + 30 * DAY)
    assert safety_audit.record(first)
    assert not safety_audit.record(first)
    changed = audit("req_1", at=T0 + timedelta(hours=5), score=0.2, category="jailbreak", expires_at=T0 + 90 * DAY)
    assert not safety_audit.record(changed)  # a different body for the same (request, layer): ignored
    assert everything(safety_audit) == [first]
    halted = audit("req_1", layer=SafetyLayer.POST, at=T0 + timedelta(seconds=3))
    assert safety_audit.record(halted)  # the same request's other layer is its own record
    assert everything(safety_audit) == [halted, first]
    # Idempotency also holds after the sweep has run past the record's expiry on the unchanged copy.
    assert safety_audit.sweep(T0 + 10 * DAY, never_held) == 0
    assert not safety_audit.record(first)


def test_listing_is_newest_first_in_a_half_open_range(safety_audit: SafetyAuditStore) -> None:
    times = [T0 + timedelta(minutes=m) for m in (0, 1, 2, 3)]
    for i, at in enumerate(times):
        safety_audit.record(audit(f"req_{i}", at=at))
    safety_audit.record(audit("req_other", tenant="ten_b", at=times[1]))
    listed = safety_audit.list_for_tenant("ten_a", times[0], times[3])  # start included, end excluded
    assert [r.request_id for r in listed] == ["req_2", "req_1", "req_0"]
    assert [r.request_id for r in safety_audit.list_for_tenant("ten_a", times[0], times[3], limit=2)] == [
        "req_2",
        "req_1",
    ]
    assert [r.request_id for r in safety_audit.list_for_tenant("ten_a", times[1], times[2])] == ["req_1"]
    assert safety_audit.list_for_tenant("ten_a", times[3], times[0]) == []  # reversed: empty
    assert safety_audit.list_for_tenant("ten_a", times[1], times[1]) == []
    assert [r.request_id for r in everything(safety_audit, "ten_b")] == ["req_other"]  # tenants never mix
    assert everything(safety_audit, "ten_nobody") == []


def test_listing_a_longer_history_with_limits(safety_audit: SafetyAuditStore) -> None:
    for i in range(30):
        safety_audit.record(audit(f"req_{i:02d}", at=T0 + timedelta(seconds=i)))
    assert [r.request_id for r in everything(safety_audit)] == [f"req_{i:02d}" for i in reversed(range(30))]
    assert len(safety_audit.list_for_tenant("ten_a", *EVERYTHING, limit=7)) == 7


def test_sweep_deletes_only_expired_records_and_is_idempotent(safety_audit: SafetyAuditStore) -> None:
    safety_audit.record(audit("req_due", expires_at=T0 + 30 * DAY))
    safety_audit.record(audit("req_later", at=T0 + timedelta(minutes=1), expires_at=T0 + 90 * DAY))
    safety_audit.record(audit("req_forever", at=T0 + timedelta(minutes=2)))  # expires_at None: never swept
    assert safety_audit.sweep(T0 + 30 * DAY - timedelta(microseconds=1), never_held) == 0
    assert safety_audit.count_due(T0 + 30 * DAY, never_held) == 1
    assert safety_audit.sweep(T0 + 30 * DAY, never_held) == 1  # expires_at <= now
    assert [r.request_id for r in everything(safety_audit)] == ["req_forever", "req_later"]
    assert safety_audit.sweep(T0 + 30 * DAY, never_held) == 0  # a second run finds nothing
    assert safety_audit.sweep(T0 + 10_000 * DAY, never_held) == 1
    assert safety_audit.sweep(T0 + 10_000 * DAY, never_held) == 0
    assert [r.request_id for r in everything(safety_audit)] == ["req_forever"]
    assert safety_audit.record(audit("req_due", expires_at=T0 + 30 * DAY))  # swept means gone, guard and all


def test_sweep_skips_tenants_under_legal_hold(safety_audit: SafetyAuditStore) -> None:
    for i in range(3):
        safety_audit.record(audit(f"held_{i}", tenant="ten_held", expires_at=T0 + DAY + timedelta(seconds=i)))
        safety_audit.record(audit(f"free_{i}", tenant="ten_free", expires_at=T0 + 2 * DAY + timedelta(seconds=i)))
    asked: list[str] = []

    def held(tenant_id: str) -> bool:
        asked.append(tenant_id)
        return tenant_id == "ten_held"

    now = T0 + 3 * DAY
    assert safety_audit.count_due(now, held) == 3
    # The held tenant's records expire first: they must not use up the limit.
    assert safety_audit.sweep(now, held, limit=2) == 2
    assert safety_audit.sweep(now, held, limit=2) == 1
    assert safety_audit.sweep(now, held) == 0
    assert "ten_held" in asked
    assert len(everything(safety_audit, "ten_held")) == 3 and everything(safety_audit, "ten_free") == []
    assert safety_audit.sweep(now, never_held) == 3  # the hold is lifted: swept on the next run
    assert everything(safety_audit, "ten_held") == []


def test_sweep_respects_its_limit_soonest_expiry_first(safety_audit: SafetyAuditStore) -> None:
    for i in range(5):
        tenant = f"ten_{i % 2}"
        safety_audit.record(audit(f"req_{i}", tenant=tenant, at=T0, expires_at=T0 + DAY + timedelta(hours=5 - i)))
    now = T0 + 2 * DAY
    assert safety_audit.count_due(now, never_held, limit=3) == 3
    assert safety_audit.count_due(now, never_held) == 5
    assert safety_audit.sweep(now, never_held, limit=2) == 2
    left = {r.request_id for t in ("ten_0", "ten_1") for r in everything(safety_audit, t)}
    assert left == {"req_0", "req_1", "req_2"}  # req_4 and req_3 expired first
    assert safety_audit.count_due(now, never_held) == 3
    assert safety_audit.sweep(now, never_held, limit=10) == 3
    assert safety_audit.count_due(now, never_held) == 0


def test_count_due_deletes_nothing(safety_audit: SafetyAuditStore) -> None:
    safety_audit.record(audit("req_due", expires_at=T0 + DAY))
    safety_audit.record(audit("req_held", tenant="ten_held", expires_at=T0 + DAY))
    now = T0 + 2 * DAY
    for _ in range(2):
        assert safety_audit.count_due(now, lambda tenant: tenant == "ten_held") == 1
    assert len(everything(safety_audit)) == 1 and len(everything(safety_audit, "ten_held")) == 1


def test_bad_input_is_refused_before_any_write(safety_audit: SafetyAuditStore) -> None:
    for bad in ({"score": 1.5}, {"score": -0.1}, {"request_id": ""}, {"request_id": "r" * 101},
                {"content": "x" * 4001}, {"layer": "middle"}, {"action": "shrugged"}):  # fmt: skip
        with pytest.raises(ValidationError):
            audit(**{"request_id": "req_bad", **bad})  # type: ignore[arg-type]
    good = audit("req_bad", expires_at=T0 + DAY)
    mutated = good.model_copy(update={"score": 7.0})  # model_copy does not validate: the store must
    constructed = SafetyAuditRecord.model_construct(**{**good.model_dump(), "content": "x" * 5000})
    for record in (mutated, constructed):
        with pytest.raises(ValidationError):
            safety_audit.record(record)
    with pytest.raises(ValueError):  # a naive time has no place on the timeline
        safety_audit.record(audit("req_bad", at=datetime(2026, 11, 20, 23, 30)))
    with pytest.raises(ValueError):
        safety_audit.record(audit("req_bad", expires_at=datetime(2026, 12, 20)))
    assert everything(safety_audit) == []
    assert safety_audit.count_due(T0 + 1000 * DAY, never_held) == 0
    assert safety_audit.record(good)  # nothing was half-written under its (request, layer)
    with pytest.raises(ValueError):
        safety_audit.list_for_tenant("ten_a", *EVERYTHING, limit=0)

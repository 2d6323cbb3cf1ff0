"""The server-side tools' audit contract, against SQLite and DynamoDB (moto): every field round-trips, records are
idempotent by run id, listed per tenant newest first within a time range; bad input writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from shared.storage.tool_audit import ToolAuditStore, ToolRunRecord, ToolRunStatus

T0 = datetime(2026, 11, 25, 4, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def run(run_id: str, tenant: str = "ten_a", at: datetime = T0, **fields: object) -> ToolRunRecord:
    values: dict[str, object] = {
        "run_id": run_id,
        "request_id": f"req_{run_id}",
        "tenant_id": tenant,
        "key_id": "key_1",
        "at": at,
        "tool": "python",
        "status": ToolRunStatus.OK,
        "duration_ms": 412,
        "exit_code": 0,
    }
    return ToolRunRecord(**{**values, **fields})  # type: ignore[arg-type]


def test_records_round_trip_and_are_idempotent(tool_audit: ToolAuditStore) -> None:
    full = run("tr_full", input='{"code": "print(2 + 2)"}', output="4\n", limits_hit=["processes", "memory"])
    bare = run("tr_bare", at=T0 + SECOND, key_id=None, tool="calculator", status=ToolRunStatus.BUSY, duration_ms=0,
               exit_code=None)  # fmt: skip
    assert tool_audit.record(full) and tool_audit.record(bare)
    assert not tool_audit.record(full.model_copy(update={"status": ToolRunStatus.ERROR}))  # unchanged
    listed = tool_audit.list_for_tenant("ten_a", T0 - SECOND, T0 + 2 * SECOND)
    assert listed == [bare, full]  # newest first, every field as written


def test_listing_is_per_tenant_bounded_by_time_and_limit(tool_audit: ToolAuditStore) -> None:
    for i in range(5):
        tool_audit.record(run(f"tr_{i}", at=T0 + i * SECOND))
    tool_audit.record(run("tr_other", tenant="ten_b"))
    assert [r.run_id for r in tool_audit.list_for_tenant("ten_a", T0 + SECOND, T0 + 4 * SECOND)] == [
        "tr_3",
        "tr_2",
        "tr_1",
    ]
    assert [r.run_id for r in tool_audit.list_for_tenant("ten_a", T0, T0 + 9 * SECOND, limit=2)] == ["tr_4", "tr_3"]
    assert [r.run_id for r in tool_audit.list_for_tenant("ten_b", T0, T0 + SECOND)] == ["tr_other"]
    assert tool_audit.list_for_tenant("ten_a", T0 + SECOND, T0) == []
    with pytest.raises(ValueError):
        tool_audit.list_for_tenant("ten_a", T0, T0 + SECOND, limit=0)


def test_bad_records_write_nothing(tool_audit: ToolAuditStore) -> None:
    with pytest.raises(ValidationError):
        run("tr_bad", duration_ms=-1)
    with pytest.raises(ValidationError):
        run("tr_bad", limits_hit=["patience"])
    broken = run("tr_broken")
    broken.duration_ms = -5  # mutated after validation: validated again before the write
    with pytest.raises(ValidationError):
        tool_audit.record(broken)
    with pytest.raises(ValidationError):
        tool_audit.record(ToolRunRecord.model_construct(**{**run("tr_naive").model_dump(), "at": "not a time"}))
    assert tool_audit.list_for_tenant("ten_a", T0 - SECOND, T0 + SECOND) == []

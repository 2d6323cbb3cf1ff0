"""SQLite audit of server-side tool runs: one row per run, listed per tenant by time."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from shared.storage.sqlite.db import SQLiteDatabase
from shared.storage.timestamps import from_iso, to_iso
from shared.storage.tool_audit import ToolRunRecord

_COLUMNS = ("run_id", "request_id", "tenant_id", "key_id", "at", "tool", "status", "duration_ms", "exit_code",
            "input", "output", "limits_hit")  # fmt: skip


def _row(record: ToolRunRecord) -> tuple[Any, ...]:
    """Validated again first (a mutated or `model_construct`ed record is refused), so bad input writes nothing."""
    record = ToolRunRecord.model_validate(record.model_dump())
    fields = {**record.model_dump(mode="json"), "at": to_iso(record.at), "limits_hit": json.dumps(record.limits_hit)}
    return tuple(fields[name] for name in _COLUMNS)


class SQLiteToolAudit:
    def __init__(self, path: Path, *, busy_timeout_s: float = 5.0) -> None:
        self.path = path
        self._database = SQLiteDatabase(path, busy_timeout_s=busy_timeout_s)  # durable: fsync on every commit

    def record(self, record: ToolRunRecord) -> bool:
        row = _row(record)
        with self._database.write() as db:
            cursor = db.execute(
                f"INSERT INTO tool_audit ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
                " ON CONFLICT (run_id) DO NOTHING",
                row,
            )
            return cursor.rowcount == 1

    def list_for_tenant(
        self, tenant_id: str, start: datetime, end: datetime, *, limit: int = 100
    ) -> list[ToolRunRecord]:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        with self._database.read() as db:
            rows = db.execute(
                "SELECT * FROM tool_audit WHERE tenant_id = ? AND at >= ? AND at < ? ORDER BY at DESC, run_id DESC"
                " LIMIT ?",
                (tenant_id, to_iso(start), to_iso(end), limit),
            ).fetchall()
        return [
            ToolRunRecord(**{**dict(row), "at": from_iso(row["at"]), "limits_hit": json.loads(row["limits_hit"])})
            for row in rows
        ]

    def close(self) -> None:
        self._database.close()

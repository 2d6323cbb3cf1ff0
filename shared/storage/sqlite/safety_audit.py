"""SQLite safety audit store: one row per (request, layer), listed per tenant by time and swept by expiry."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from shared.storage.safety_audit import SafetyAuditRecord
from shared.storage.sqlite.db import SQLiteDatabase
from shared.storage.timestamps import from_iso, optional_from_iso, optional_iso, to_iso

_COLUMNS = (
    "request_id",
    "layer",
    "tenant_id",
    "key_id",
    "at",
    "detector",
    "category",
    "score",
    "policy_version",
    "action",
    "model",
    "content",
    "expires_at",
)
_PAGE = 500  # due rows read per query while sweeping


def _row(record: SafetyAuditRecord) -> tuple[Any, ...]:
    """The row's values; validated again first (a mutated or `model_construct`ed record is refused, and so is a
    naive time), so bad input raises before anything is written."""
    record = SafetyAuditRecord.model_validate(record.model_dump())
    fields = record.model_dump(mode="json", exclude={"at", "expires_at"})
    times = {"at": to_iso(record.at), "expires_at": optional_iso(record.expires_at)}
    return tuple({**fields, **times}[name] for name in _COLUMNS)


def _record(fields: dict[str, Any]) -> SafetyAuditRecord:
    return SafetyAuditRecord(
        **{**fields, "at": from_iso(fields["at"]), "expires_at": optional_from_iso(fields["expires_at"])}
    )


class SQLiteSafetyAudit:
    def __init__(self, path: Path, *, busy_timeout_s: float = 5.0) -> None:
        self.path = path
        self._database = SQLiteDatabase(path, busy_timeout_s=busy_timeout_s)  # durable: fsync on every commit

    def record(self, record: SafetyAuditRecord) -> bool:
        row = _row(record)
        with self._database.write() as db:
            cursor = db.execute(
                f"INSERT INTO safety_audit ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
                " ON CONFLICT (request_id, layer) DO NOTHING",
                row,
            )
            return cursor.rowcount == 1

    def list_for_tenant(
        self, tenant_id: str, start: datetime, end: datetime, *, limit: int = 100
    ) -> list[SafetyAuditRecord]:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        with self._database.read() as db:
            rows = db.execute(
                "SELECT * FROM safety_audit WHERE tenant_id = ? AND at >= ? AND at < ?"
                " ORDER BY at DESC, request_id DESC, layer DESC LIMIT ?",
                (tenant_id, to_iso(start), to_iso(end), limit),
            ).fetchall()
        return [_record(dict(row)) for row in rows]

    def sweep(self, now: datetime, is_held: Callable[[str], bool], *, limit: int = 1000) -> int:
        deleted = 0
        for batch in _batches(self._releasable(now, is_held, limit), 100):
            with self._database.write() as db:
                for request_id, layer in batch:
                    deleted += db.execute(
                        "DELETE FROM safety_audit WHERE request_id = ? AND layer = ?", (request_id, layer)
                    ).rowcount
        return deleted

    def count_due(self, now: datetime, is_held: Callable[[str], bool], *, limit: int = 1000) -> int:
        return sum(1 for _ in self._releasable(now, is_held, limit))

    def _releasable(self, now: datetime, is_held: Callable[[str], bool], limit: int) -> Iterator[tuple[str, str]]:
        """(request, layer) of up to `limit` due records of tenants not held, soonest expiry first."""
        found = 0
        for tenant_id, request_id, layer in self._due(now):
            if found >= limit:
                return
            if not is_held(tenant_id):
                found += 1
                yield request_id, layer

    def _due(self, now: datetime) -> Iterator[tuple[str, str, str]]:
        """(tenant, request, layer) of every record with expires_at <= now, by expiry; read a page at a time on the
        partial expiry index, so no unexpired row is ever read."""
        after: tuple[str, str, str] = ("", "", "")
        while True:
            with self._database.read() as db:
                rows = db.execute(
                    "SELECT tenant_id, request_id, layer, expires_at FROM safety_audit"
                    " WHERE expires_at IS NOT NULL AND expires_at >= ? AND expires_at <= ?"
                    " AND (expires_at, request_id, layer) > (?, ?, ?) ORDER BY expires_at, request_id, layer LIMIT ?",
                    (after[0], to_iso(now), *after, _PAGE),
                ).fetchall()
            for row in rows:
                yield row["tenant_id"], row["request_id"], row["layer"]
            if len(rows) < _PAGE:
                return
            last = rows[-1]
            after = (last["expires_at"], last["request_id"], last["layer"])

    def close(self) -> None:
        self._database.close()


def _batches(items: Iterator[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    batch: list[tuple[str, str]] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch

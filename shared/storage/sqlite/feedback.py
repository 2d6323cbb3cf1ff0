"""SQLite feedback store: one row per (tenant, conversation, message index) in the embedded database file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shared.storage.feedback import FeedbackRecord
from shared.storage.sqlite.db import SQLiteDatabase

_COLUMNS = tuple(FeedbackRecord.model_fields)
_PAGE = 500  # rows read per query while listing a tenant


def _row(record: FeedbackRecord) -> tuple[Any, ...]:
    fields = record.stored_fields()  # validates: bad input raises before anything is written
    return tuple(fields[name] for name in _COLUMNS)


def _record(row: Any) -> FeedbackRecord:
    return FeedbackRecord.from_stored(dict(row))


class SQLiteFeedback:
    def __init__(self, path: Path, *, busy_timeout_s: float = 5.0) -> None:
        self.path = path
        self._database = SQLiteDatabase(path, busy_timeout_s=busy_timeout_s)  # durable: fsync on every commit

    def put(self, record: FeedbackRecord) -> FeedbackRecord | None:
        row = _row(record)
        key = (record.tenant_id, record.conversation_id, record.message_index)
        with self._database.write() as db:  # read and replace in one transaction: the old one returned is exact
            old = db.execute(
                "SELECT * FROM feedback WHERE tenant_id = ? AND conversation_id = ? AND message_index = ?", key
            ).fetchone()
            db.execute(
                f"INSERT OR REPLACE INTO feedback ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
                row,
            )
        return None if old is None else _record(old)

    def get(self, tenant_id: str, conversation_id: str, message_index: int) -> FeedbackRecord | None:
        with self._database.read() as db:
            row = db.execute(
                "SELECT * FROM feedback WHERE tenant_id = ? AND conversation_id = ? AND message_index = ?",
                (tenant_id, conversation_id, message_index),
            ).fetchone()
        return None if row is None else _record(row)

    def list_conversation(self, tenant_id: str, conversation_id: str) -> list[FeedbackRecord]:
        with self._database.read() as db:
            rows = db.execute(
                "SELECT * FROM feedback WHERE tenant_id = ? AND conversation_id = ? ORDER BY message_index",
                (tenant_id, conversation_id),
            ).fetchall()
        return [_record(row) for row in rows]

    def list_tenant(self, tenant_id: str) -> Iterator[FeedbackRecord]:
        after: tuple[str, int] = ("", -1)
        while True:  # a page per read transaction: a long export never holds the database
            with self._database.read() as db:
                rows = db.execute(
                    "SELECT * FROM feedback WHERE tenant_id = ? AND (conversation_id, message_index) > (?, ?)"
                    " ORDER BY conversation_id, message_index LIMIT ?",
                    (tenant_id, *after, _PAGE),
                ).fetchall()
            yield from (_record(row) for row in rows)
            if len(rows) < _PAGE:
                return
            after = (rows[-1]["conversation_id"], rows[-1]["message_index"])

    def tenants(self) -> list[str]:
        with self._database.read() as db:
            rows = db.execute("SELECT DISTINCT tenant_id FROM feedback ORDER BY tenant_id").fetchall()
        return [row[0] for row in rows]

    def delete(self, tenant_id: str, conversation_id: str, message_index: int) -> bool:
        with self._database.write() as db:
            cursor = db.execute(
                "DELETE FROM feedback WHERE tenant_id = ? AND conversation_id = ? AND message_index = ?",
                (tenant_id, conversation_id, message_index),
            )
            return cursor.rowcount == 1

    def delete_conversation(self, tenant_id: str, conversation_id: str) -> int:
        with self._database.write() as db:
            cursor = db.execute(
                "DELETE FROM feedback WHERE tenant_id = ? AND conversation_id = ?", (tenant_id, conversation_id)
            )
            return cursor.rowcount

    def erase_tenant(self, tenant_id: str) -> int:
        with self._database.write() as db:
            return db.execute("DELETE FROM feedback WHERE tenant_id = ?", (tenant_id,)).rowcount

    def close(self) -> None:
        self._database.close()

"""SQLite `BatchStore`: batches and their line results in the embedded database. Every read-modify-write runs in one
write transaction (SQLite's single writer), which is what makes `claim`, `advance` and `record_line` atomic."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from shared.storage.batches import BatchUpdate, LineResult, StoredBatch
from shared.storage.sqlite.db import SQLiteDatabase
from shared.storage.timestamps import to_iso
from shared.wire.batches_api import FINAL_STATUSES

_FINAL = tuple(sorted(FINAL_STATUSES))
_PAGE = 500  # line results read at a time
_NOT_FINAL = f"status NOT IN ({', '.join('?' for _ in _FINAL)})"


def _batch(row: sqlite3.Row) -> StoredBatch:
    return StoredBatch.model_validate_json(row["record"])


class SQLiteBatchStore:
    def __init__(self, path: Path, *, busy_timeout_s: float = 5.0) -> None:
        self.path = path
        self._db = SQLiteDatabase(path, busy_timeout_s=busy_timeout_s)

    def create(self, batch: StoredBatch) -> None:
        with self._db.write() as db:
            db.execute(
                "INSERT INTO batches (tenant_id, id, status, created_at, record) VALUES (?, ?, ?, ?, ?)",
                (batch.tenant_id, batch.id, batch.status, to_iso(batch.created_at), batch.model_dump_json()),
            )

    def get(self, tenant_id: str, batch_id: str) -> StoredBatch | None:
        with self._db.read() as db:
            row = self._row(db, tenant_id, batch_id)
        return None if row is None else _batch(row)

    @staticmethod
    def _row(db: sqlite3.Connection, tenant_id: str, batch_id: str) -> sqlite3.Row | None:
        return db.execute("SELECT record FROM batches WHERE tenant_id = ? AND id = ?", (tenant_id, batch_id)).fetchone()  # type: ignore[no-any-return]

    def list(self, tenant_id: str, *, after: str | None, limit: int) -> list[StoredBatch]:
        cursor = ""
        args: list[object] = [tenant_id]
        if after is not None:
            cursor = " AND (created_at, id) < (SELECT created_at, id FROM batches WHERE tenant_id = ? AND id = ?)"
            args += [tenant_id, after]
        with self._db.read() as db:
            rows = db.execute(
                f"SELECT record FROM batches WHERE tenant_id = ?{cursor} ORDER BY created_at DESC, id DESC LIMIT ?",
                (*args, limit),
            ).fetchall()
        return [_batch(row) for row in rows]

    def active(self) -> Iterator[StoredBatch]:
        with self._db.read() as db:
            rows = db.execute(f"SELECT record FROM batches WHERE {_NOT_FINAL} ORDER BY created_at", _FINAL).fetchall()
        return iter([_batch(row) for row in rows])

    def claim(self, tenant_id: str, batch_id: str, owner: str, until: datetime, now: datetime) -> bool:
        with self._db.write() as db:
            row = self._row(db, tenant_id, batch_id)
            if row is None:
                return False
            batch = _batch(row)
            held_elsewhere = batch.claim_owner not in (None, owner) and batch.claim_until and batch.claim_until >= now
            if batch.status in FINAL_STATUSES or held_elsewhere:
                return False
            self._write(db, batch.model_copy(update={"claim_owner": owner, "claim_until": until}))
            return True

    def advance(
        self, tenant_id: str, batch_id: str, update: BatchUpdate, *, from_statuses: frozenset[str], owner: str | None
    ) -> StoredBatch | None:
        with self._db.write() as db:
            row = self._row(db, tenant_id, batch_id)
            if row is None:
                return None
            batch = _batch(row)
            if batch.status not in from_statuses or (owner is not None and batch.claim_owner != owner):
                return None
            written = update.applied_to(batch)
            self._write(db, written)
            return written

    def record_line(self, result: LineResult) -> bool:
        with self._db.write() as db:
            row = self._row(db, result.tenant_id, result.batch_id)
            if row is None:
                return False
            inserted = db.execute(
                "INSERT INTO batch_lines (tenant_id, batch_id, line, record) VALUES (?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (result.tenant_id, result.batch_id, result.line, result.model_dump_json()),
            ).rowcount
            if inserted != 1:
                return False
            batch = _batch(row)
            self._write(db, batch.model_copy(update=_counted(batch, result)))
            return True

    def lines(self, tenant_id: str, batch_id: str) -> Iterator[LineResult]:
        """Page by page (a batch's results can be large: never all in memory at once)."""
        after = -1
        while True:
            with self._db.read() as db:
                rows = db.execute(
                    "SELECT line, record FROM batch_lines WHERE tenant_id = ? AND batch_id = ? AND line > ?"
                    " ORDER BY line LIMIT ?",
                    (tenant_id, batch_id, after, _PAGE),
                ).fetchall()
            yield from (LineResult.model_validate_json(row["record"]) for row in rows)
            if len(rows) < _PAGE:
                return
            after = int(rows[-1]["line"])

    def done_lines(self, tenant_id: str, batch_id: str) -> set[int]:
        with self._db.read() as db:
            rows = db.execute(
                "SELECT line FROM batch_lines WHERE tenant_id = ? AND batch_id = ?", (tenant_id, batch_id)
            ).fetchall()
        return {int(row[0]) for row in rows}

    def delete_tenant(self, tenant_id: str) -> int:
        with self._db.write() as db:
            db.execute("DELETE FROM batch_lines WHERE tenant_id = ?", (tenant_id,))
            return db.execute("DELETE FROM batches WHERE tenant_id = ?", (tenant_id,)).rowcount

    @staticmethod
    def _write(db: sqlite3.Connection, batch: StoredBatch) -> None:
        db.execute(
            "UPDATE batches SET status = ?, record = ? WHERE tenant_id = ? AND id = ?",
            (batch.status, batch.model_dump_json(), batch.tenant_id, batch.id),
        )

    def close(self) -> None:
        self._db.close()


def _counted(batch: StoredBatch, result: LineResult) -> dict[str, int]:
    """The batch's counts and usage with `result` added (shared by both adapters)."""
    return {
        "completed": batch.completed + (1 if result.ok else 0),
        "failed": batch.failed + (0 if result.ok else 1),
        "input_tokens": batch.input_tokens + result.input_tokens,
        "cached_tokens": batch.cached_tokens + result.cached_tokens,
        "output_tokens": batch.output_tokens + result.output_tokens,
    }

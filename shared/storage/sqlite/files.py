"""SQLite `FileStore`: files, vector stores and attachments in the embedded database (tables of migration 12)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from shared.storage.files import Attachment, AttachmentState, FileQuota, QuotaExceeded, StoredFile, StoredVectorStore
from shared.storage.sqlite.db import SQLiteDatabase
from shared.storage.timestamps import from_iso, optional_from_iso, optional_iso, to_iso


def _file(row: sqlite3.Row) -> StoredFile:
    values = dict(row)
    values.update(created_at=from_iso(row["created_at"]), expires_at=optional_from_iso(row["expires_at"]))
    return StoredFile(**values)


def _store(row: sqlite3.Row) -> StoredVectorStore:
    values = dict(row)
    values.update(
        created_at=from_iso(row["created_at"]),
        last_active_at=from_iso(row["last_active_at"]),
        metadata=json.loads(row["metadata"]),
    )
    return StoredVectorStore(**values)


def _attachment(row: sqlite3.Row) -> Attachment:
    values = dict(row)
    values.update(created_at=from_iso(row["created_at"]), attributes=json.loads(row["attributes"]))
    return Attachment(**values)


def _page(after: str | None, newest_first: bool) -> tuple[str, list[Any]]:
    """The ORDER BY and cursor condition of a list: by creation time, then id (ids are random)."""
    order = "DESC" if newest_first else "ASC"
    if after is None:
        return f" ORDER BY created_at {order}, id {order} LIMIT ?", []
    compare = "<" if newest_first else ">"
    condition = (
        f" AND (created_at, id) {compare} (SELECT created_at, id FROM {{table}} WHERE tenant_id = ? AND id = ?)"
        f" ORDER BY created_at {order}, id {order} LIMIT ?"
    )
    return condition, [after]


class SQLiteFileStore:
    def __init__(self, path: Path, *, busy_timeout_s: float = 5.0) -> None:
        self.path = path
        self._db = SQLiteDatabase(path, busy_timeout_s=busy_timeout_s)

    # -- files ----------------------------------------------------------------------------------------------------

    def add_file(self, record: StoredFile, quota: FileQuota) -> None:
        with self._db.write() as db:  # count and insert in one write transaction: racing uploads queue here
            count, total = db.execute(
                "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM files WHERE tenant_id = ?", (record.tenant_id,)
            ).fetchone()
            if count + 1 > quota.max_files:
                raise QuotaExceeded("files", quota.max_files)
            if total + record.bytes > quota.max_total_bytes:
                raise QuotaExceeded("bytes", quota.max_total_bytes)
            db.execute(
                "INSERT INTO files (tenant_id, id, filename, purpose, bytes, kind, sha256, created_at, expires_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.tenant_id, record.id, record.filename, record.purpose, record.bytes, record.kind,
                    record.sha256, to_iso(record.created_at), optional_iso(record.expires_at),
                ),
            )  # fmt: skip

    def get_file(self, tenant_id: str, file_id: str) -> StoredFile | None:
        with self._db.read() as db:
            row = db.execute("SELECT * FROM files WHERE tenant_id = ? AND id = ?", (tenant_id, file_id)).fetchone()
        return None if row is None else _file(row)

    def list_files(
        self, tenant_id: str, *, purpose: str | None, after: str | None, limit: int, newest_first: bool
    ) -> list[StoredFile]:
        query, args = "SELECT * FROM files WHERE tenant_id = ?", [tenant_id]
        if purpose is not None:
            query, args = query + " AND purpose = ?", [*args, purpose]
        tail, cursor = _page(after, newest_first)
        args += [tenant_id, *cursor] if cursor else []
        with self._db.read() as db:
            rows = db.execute(query + tail.format(table="files"), [*args, limit]).fetchall()
        return [_file(row) for row in rows]

    def delete_file(self, tenant_id: str, file_id: str) -> bool:
        with self._db.write() as db:
            db.execute("DELETE FROM vector_store_files WHERE tenant_id = ? AND file_id = ?", (tenant_id, file_id))
            return db.execute("DELETE FROM files WHERE tenant_id = ? AND id = ?", (tenant_id, file_id)).rowcount > 0

    def usage(self, tenant_id: str) -> tuple[int, int]:
        with self._db.read() as db:
            count, total = db.execute(
                "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM files WHERE tenant_id = ?", (tenant_id,)
            ).fetchone()
        return int(count), int(total)

    # -- vector stores --------------------------------------------------------------------------------------------

    def create_vector_store(self, record: StoredVectorStore) -> None:
        with self._db.write() as db:
            db.execute(
                "INSERT INTO vector_stores (tenant_id, id, name, created_at, last_active_at, embedding_model,"
                " metadata, expires_after_days) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.tenant_id, record.id, record.name, to_iso(record.created_at),
                    to_iso(record.last_active_at), record.embedding_model, json.dumps(record.metadata),
                    record.expires_after_days,
                ),
            )  # fmt: skip

    def get_vector_store(self, tenant_id: str, store_id: str) -> StoredVectorStore | None:
        with self._db.read() as db:
            row = db.execute(
                "SELECT * FROM vector_stores WHERE tenant_id = ? AND id = ?", (tenant_id, store_id)
            ).fetchone()
        return None if row is None else _store(row)

    def list_vector_stores(
        self, tenant_id: str, *, after: str | None, limit: int, newest_first: bool
    ) -> list[StoredVectorStore]:
        tail, cursor = _page(after, newest_first)
        args = [tenant_id, *([tenant_id, *cursor] if cursor else []), limit]
        with self._db.read() as db:
            rows = db.execute(
                "SELECT * FROM vector_stores WHERE tenant_id = ?" + tail.format(table="vector_stores"), args
            ).fetchall()
        return [_store(row) for row in rows]

    def touch_vector_store(self, tenant_id: str, store_id: str, at: datetime) -> None:
        with self._db.write() as db:
            db.execute(
                "UPDATE vector_stores SET last_active_at = ? WHERE tenant_id = ? AND id = ?",
                (to_iso(at), tenant_id, store_id),
            )

    def delete_vector_store(self, tenant_id: str, store_id: str) -> bool:
        with self._db.write() as db:
            db.execute(
                "DELETE FROM vector_store_files WHERE tenant_id = ? AND vector_store_id = ?", (tenant_id, store_id)
            )
            cursor = db.execute("DELETE FROM vector_stores WHERE tenant_id = ? AND id = ?", (tenant_id, store_id))
            return cursor.rowcount > 0

    # -- attachments ----------------------------------------------------------------------------------------------

    def attach(self, attachment: Attachment) -> Attachment:
        a = attachment
        with self._db.write() as db:
            db.execute(
                "INSERT OR IGNORE INTO vector_store_files (tenant_id, vector_store_id, file_id, created_at, status,"
                " error_code, error_message, usage_bytes, chunks, key_id, attributes)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    a.tenant_id, a.vector_store_id, a.file_id, to_iso(a.created_at), a.status, a.error_code,
                    a.error_message, a.usage_bytes, a.chunks, a.key_id, json.dumps(a.attributes),
                ),
            )  # fmt: skip
            row = db.execute(
                "SELECT * FROM vector_store_files WHERE tenant_id = ? AND vector_store_id = ? AND file_id = ?",
                (a.tenant_id, a.vector_store_id, a.file_id),
            ).fetchone()
        return _attachment(row)

    def get_attachment(self, tenant_id: str, store_id: str, file_id: str) -> Attachment | None:
        with self._db.read() as db:
            row = db.execute(
                "SELECT * FROM vector_store_files WHERE tenant_id = ? AND vector_store_id = ? AND file_id = ?",
                (tenant_id, store_id, file_id),
            ).fetchone()
        return None if row is None else _attachment(row)

    def list_attachments(self, tenant_id: str, store_id: str) -> list[Attachment]:
        with self._db.read() as db:
            rows = db.execute(
                "SELECT * FROM vector_store_files WHERE tenant_id = ? AND vector_store_id = ?"
                " ORDER BY created_at, file_id",
                (tenant_id, store_id),
            ).fetchall()
        return [_attachment(row) for row in rows]

    def attachment_states(self, tenant_id: str, store_id: str) -> dict[str, AttachmentState]:
        with self._db.read() as db:
            rows = db.execute(
                "SELECT file_id, status, attributes FROM vector_store_files"
                " WHERE tenant_id = ? AND vector_store_id = ?",
                (tenant_id, store_id),
            ).fetchall()
        return {row[0]: AttachmentState(row[1], json.loads(row[2])) for row in rows}

    def attachments_of_file(self, tenant_id: str, file_id: str) -> list[Attachment]:
        with self._db.read() as db:
            rows = db.execute(
                "SELECT * FROM vector_store_files WHERE tenant_id = ? AND file_id = ?", (tenant_id, file_id)
            ).fetchall()
        return [_attachment(row) for row in rows]

    def finish(self, attachment: Attachment) -> bool:
        a = attachment
        with self._db.write() as db:
            cursor = db.execute(
                "UPDATE vector_store_files SET status = ?, error_code = ?, error_message = ?, usage_bytes = ?,"
                " chunks = ? WHERE tenant_id = ? AND vector_store_id = ? AND file_id = ? AND status = 'in_progress'",
                (
                    a.status, a.error_code, a.error_message, a.usage_bytes, a.chunks, a.tenant_id,
                    a.vector_store_id, a.file_id,
                ),
            )  # fmt: skip
            return cursor.rowcount > 0

    def detach(self, tenant_id: str, store_id: str, file_id: str) -> bool:
        with self._db.write() as db:
            cursor = db.execute(
                "DELETE FROM vector_store_files WHERE tenant_id = ? AND vector_store_id = ? AND file_id = ?",
                (tenant_id, store_id, file_id),
            )
            return cursor.rowcount > 0

    def pending(self) -> Iterator[Attachment]:
        with self._db.read() as db:
            rows = db.execute("SELECT * FROM vector_store_files WHERE status = 'in_progress'").fetchall()
        yield from (_attachment(row) for row in rows)

    def claim(self, tenant_id: str, store_id: str, file_id: str, owner: str, until: datetime, now: datetime) -> bool:
        with self._db.write() as db:  # one writer at a time: the check and the take cannot interleave
            cursor = db.execute(
                "UPDATE vector_store_files SET claim_owner = ?, claim_until = ? WHERE tenant_id = ?"
                " AND vector_store_id = ? AND file_id = ? AND status = 'in_progress'"
                " AND (claim_until IS NULL OR claim_until < ? OR claim_owner = ?)",
                (owner, to_iso(until), tenant_id, store_id, file_id, to_iso(now), owner),
            )
            return cursor.rowcount > 0

    def tenants(self) -> list[str]:
        with self._db.read() as db:
            rows = db.execute(
                "SELECT tenant_id FROM files UNION SELECT tenant_id FROM vector_stores ORDER BY tenant_id"
            ).fetchall()
        return [row[0] for row in rows]

    def close(self) -> None:
        self._db.close()

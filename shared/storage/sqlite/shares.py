"""SQLite share-link store (the embedded default): one row per share, its snapshot as JSON."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from shared.storage.shares import Share, SharedMessage
from shared.storage.sqlite.db import SQLiteDatabase
from shared.storage.timestamps import from_iso, to_iso

_COLUMNS = "id, tenant_id, conversation_id, title, messages, created_at, expires_at"


def _share(row: sqlite3.Row) -> Share:
    return Share(
        id=row["id"],
        tenant_id=row["tenant_id"],
        conversation_id=row["conversation_id"],
        title=row["title"],
        messages=[SharedMessage.model_validate(m) for m in json.loads(row["messages"])],
        created_at=from_iso(row["created_at"]),
        expires_at=from_iso(row["expires_at"]),
    )


class SQLiteShares:
    def __init__(self, path: Path) -> None:
        self._database = SQLiteDatabase(path)

    def create(self, share: Share, token_digest: str) -> None:
        messages = json.dumps([m.model_dump(mode="json") for m in share.messages], ensure_ascii=False)
        with self._database.write() as db:
            db.execute(
                f"INSERT INTO shares (token_hash, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (token_digest, share.id, share.tenant_id, share.conversation_id, share.title, messages,
                 to_iso(share.created_at), to_iso(share.expires_at)),
            )  # fmt: skip

    def by_token(self, token_digest: str) -> Share | None:
        with self._database.read() as db:
            row = db.execute(f"SELECT {_COLUMNS} FROM shares WHERE token_hash = ?", (token_digest,)).fetchone()
        return None if row is None else _share(row)

    def list_conversation(self, tenant_id: str, conversation_id: str) -> list[Share]:
        with self._database.read() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM shares WHERE tenant_id = ? AND conversation_id = ? ORDER BY created_at, id",
                (tenant_id, conversation_id),
            ).fetchall()
        return [_share(row) for row in rows]

    def revoke(self, tenant_id: str, share_id: str) -> bool:
        with self._database.write() as db:
            gone = db.execute("DELETE FROM shares WHERE id = ? AND tenant_id = ?", (share_id, tenant_id)).rowcount
        return gone > 0

    def delete_conversation(self, tenant_id: str, conversation_id: str) -> int:
        with self._database.write() as db:
            return db.execute(
                "DELETE FROM shares WHERE tenant_id = ? AND conversation_id = ?", (tenant_id, conversation_id)
            ).rowcount

    def erase_tenant(self, tenant_id: str) -> int:
        with self._database.write() as db:
            return db.execute("DELETE FROM shares WHERE tenant_id = ?", (tenant_id,)).rowcount

    def close(self) -> None:
        self._database.close()

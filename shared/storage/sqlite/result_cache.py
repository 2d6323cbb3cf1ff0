"""SQLite result cache: its own WAL file beside the gateway's database (a cache is not worth an fsync per write nor
a migration of the main schema), bounded in entries: expired rows go first, then the oldest."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from shared.storage.conversations import StoreUnavailableError
from shared.storage.result_cache import CachedAnswer
from shared.storage.timestamps import from_iso, to_iso

_SCHEMA = """CREATE TABLE IF NOT EXISTS result_cache (
    tenant_id TEXT NOT NULL,
    key TEXT NOT NULL,
    pool TEXT NOT NULL,
    model_version TEXT NOT NULL,
    content TEXT NOT NULL,
    finish_reason TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, key)
) WITHOUT ROWID"""
_COLUMNS = tuple(CachedAnswer.model_fields)
# Eviction reads these; without them each bounded put would scan the table.
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS result_cache_by_expiry ON result_cache(expires_at)",
    "CREATE INDEX IF NOT EXISTS result_cache_by_age ON result_cache(created_at)",
)


class SQLiteResultCache:
    """Thread-safe (one connection behind a lock); other gateway processes on the machine share the file."""

    def __init__(self, path: Path, *, max_entries: int = 10_000, busy_timeout_s: float = 1.0) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=busy_timeout_s)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # a power cut may lose the last entries: only a cache
        with self._transaction() as db:
            for statement in (_SCHEMA, *_INDEXES):
                db.execute(statement)

    def get(self, tenant_id: str, key: str, now: datetime) -> CachedAnswer | None:
        with self._transaction("BEGIN") as db:
            row = db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM result_cache WHERE tenant_id = ? AND key = ? AND expires_at > ?",
                (tenant_id, key, to_iso(now)),
            ).fetchone()
        if row is None:
            return None
        fields = dict(zip(_COLUMNS, row, strict=True))
        return CachedAnswer(
            **{**fields, "created_at": from_iso(fields["created_at"]), "expires_at": from_iso(fields["expires_at"])}
        )

    def put(self, answer: CachedAnswer) -> None:
        answer = CachedAnswer.model_validate(answer.model_dump())  # a mutated record is refused before any write
        values = {
            **answer.model_dump(),
            "created_at": to_iso(answer.created_at),
            "expires_at": to_iso(answer.expires_at),
        }
        with self._transaction() as db:
            db.execute(
                f"INSERT OR REPLACE INTO result_cache ({', '.join(_COLUMNS)})"
                f" VALUES ({', '.join('?' * len(_COLUMNS))})",
                tuple(values[name] for name in _COLUMNS),
            )
            self._evict(db, answer.created_at)

    def _evict(self, db: sqlite3.Connection, now: datetime) -> None:
        """Keep at most `max_entries`: drop what has expired, then the oldest entries."""
        count = int(db.execute("SELECT COUNT(*) FROM result_cache").fetchone()[0])
        if count <= self.max_entries:
            return
        db.execute("DELETE FROM result_cache WHERE expires_at <= ?", (to_iso(now),))
        excess = int(db.execute("SELECT COUNT(*) FROM result_cache").fetchone()[0]) - self.max_entries
        if excess > 0:
            db.execute(
                "DELETE FROM result_cache WHERE (tenant_id, key) IN"
                " (SELECT tenant_id, key FROM result_cache ORDER BY created_at, tenant_id, key LIMIT ?)",
                (excess,),
            )

    def forget_tenant(self, tenant_id: str) -> int:
        with self._transaction() as db:
            return db.execute("DELETE FROM result_cache WHERE tenant_id = ?", (tenant_id,)).rowcount

    def count(self) -> int:
        with self._transaction("BEGIN") as db:
            return int(db.execute("SELECT COUNT(*) FROM result_cache").fetchone()[0])

    @contextmanager
    def _transaction(self, begin: str = "BEGIN IMMEDIATE") -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute(begin)
            except sqlite3.OperationalError as exc:  # locked or unreadable: the cache is skipped, never an error
                raise StoreUnavailableError(f"result cache unavailable: {exc}") from exc
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            self._db.close()

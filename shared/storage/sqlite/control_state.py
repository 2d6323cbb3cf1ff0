"""The shared control state in SQLite: a file of its own in the data dir (`control.db`), opened by every gateway
process of the local stack, so a busy stream's writes never queue behind the accounts database's."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from shared.storage.control_state import ORPHAN_TTL_S, StreamEvent, StreamOpen, StreamRecord, TokenBucket
from shared.storage.sqlite.db import SQLiteDatabase

# Append-only, like the main database's migrations.
CONTROL_MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE streams (
            stream_id TEXT PRIMARY KEY,
            tenant_id TEXT NOT NULL,
            owner TEXT NOT NULL,
            headers TEXT NOT NULL,
            first_seq INTEGER NOT NULL,
            next_seq INTEGER NOT NULL,
            size INTEGER NOT NULL,
            ended INTEGER NOT NULL,
            expires_at REAL NOT NULL
        )""",
        "CREATE INDEX streams_by_expiry ON streams(expires_at)",
        """CREATE TABLE stream_names (
            tenant_id TEXT NOT NULL,
            name TEXT NOT NULL,
            stream_id TEXT NOT NULL,
            PRIMARY KEY (tenant_id, name)
        ) WITHOUT ROWID""",
        "CREATE INDEX stream_names_by_stream ON stream_names(stream_id)",
        """CREATE TABLE stream_events (
            stream_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            data BLOB NOT NULL,
            PRIMARY KEY (stream_id, seq)
        ) WITHOUT ROWID""",
        """CREATE TABLE records (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            expires_at REAL,
            PRIMARY KEY (namespace, key)
        ) WITHOUT ROWID""",
        """CREATE TABLE buckets (
            scope TEXT PRIMARY KEY,
            tokens REAL NOT NULL,
            at REAL NOT NULL
        ) WITHOUT ROWID""",
    ],
    [
        "ALTER TABLE streams ADD COLUMN takeover TEXT",  # JSON, or NULL: what finishing it elsewhere needs
    ],
    [
        """CREATE TABLE leases (
            scope TEXT NOT NULL,
            holder TEXT NOT NULL,
            expires_at REAL NOT NULL,
            PRIMARY KEY (scope, holder)
        ) WITHOUT ROWID""",
    ],
]

# Expired streams are deleted at most this often (by whichever process opens a stream next).
_SWEEP_EVERY_S = 10.0


class SQLiteControlState:
    def __init__(self, path: Path, *, busy_timeout_s: float = 1.0, clock: Callable[[], float] = time.time) -> None:
        # Not durable: control state is worth less than an fsync per write (a power cut loses the last commits).
        self._database = SQLiteDatabase(
            path, busy_timeout_s=busy_timeout_s, durable=False, migrations=CONTROL_MIGRATIONS
        )
        self._clock = clock
        self._swept_at = 0.0

    # -- resumable streams ---------------------------------------------------------------------------------------------
    async def open_stream(self, stream: StreamOpen, names: list[str]) -> None:
        await asyncio.to_thread(self._open_stream, stream, names)

    def _open_stream(self, stream: StreamOpen, names: list[str]) -> None:
        now = self._clock()
        with self._database.write() as db:
            if now - self._swept_at >= _SWEEP_EVERY_S:
                self._swept_at = now
                self._sweep(db, now)
            takeover = None if stream.takeover is None else json.dumps(stream.takeover)
            db.execute(
                "INSERT OR REPLACE INTO streams (stream_id, tenant_id, owner, headers, first_seq, next_seq, size,"
                " ended, expires_at, takeover) VALUES (?, ?, ?, ?, 1, 1, 0, 0, ?, ?)",
                (
                    stream.stream_id,
                    stream.tenant_id,
                    stream.owner,
                    json.dumps(stream.headers),
                    now + ORPHAN_TTL_S,
                    takeover,
                ),
            )
            for name in names:
                self._name(db, stream.tenant_id, name, stream.stream_id)

    async def name_stream(self, tenant_id: str, name: str, stream_id: str) -> None:
        def name_it() -> None:
            with self._database.write() as db:
                self._name(db, tenant_id, name, stream_id)

        await asyncio.to_thread(name_it)

    @staticmethod
    def _name(db: sqlite3.Connection, tenant_id: str, name: str, stream_id: str) -> None:
        db.execute(
            "INSERT OR REPLACE INTO stream_names (tenant_id, name, stream_id) VALUES (?, ?, ?)",
            (tenant_id, name, stream_id),
        )

    async def append_events(
        self, stream_id: str, owner: str, events: list[StreamEvent], *, ended: bool, max_bytes: int, ttl_s: float
    ) -> bool:
        return await asyncio.to_thread(self._append, stream_id, owner, events, ended, max_bytes, ttl_s)

    def _append(
        self, stream_id: str, owner: str, events: list[StreamEvent], ended: bool, max_bytes: int, ttl_s: float
    ) -> bool:
        now = self._clock()
        with self._database.write() as db:
            row = db.execute(
                "SELECT first_seq, next_seq, size, owner FROM streams WHERE stream_id = ?", (stream_id,)
            ).fetchone()
            if row is None or row["owner"] != owner:  # forgotten (expired), or taken over by another gateway
                return False
            first, following, size = row["first_seq"], row["next_seq"], row["size"]
            for event in events:
                if event.seq < following:  # a retried write: never doubled
                    continue
                db.execute(
                    "INSERT OR REPLACE INTO stream_events (stream_id, seq, data) VALUES (?, ?, ?)",
                    (stream_id, event.seq, event.data),
                )
                size += len(event.data)
                following = max(following, event.seq + 1)
            if size > max_bytes:
                held = db.execute(
                    "SELECT seq, length(data) AS n FROM stream_events WHERE stream_id = ? ORDER BY seq", (stream_id,)
                ).fetchall()
                drop_below = first
                for index, event in enumerate(held):
                    if size <= max_bytes or index == len(held) - 1:
                        break
                    size -= event["n"]
                    drop_below = event["seq"] + 1
                db.execute("DELETE FROM stream_events WHERE stream_id = ? AND seq < ?", (stream_id, drop_below))
                first = drop_below
            db.execute(
                "UPDATE streams SET first_seq = ?, next_seq = ?, size = ?, ended = ?, expires_at = ?"
                " WHERE stream_id = ?",
                (first, following, size, int(ended), now + (ttl_s if ended else ORPHAN_TTL_S), stream_id),
            )
            return True

    async def claim_stream(self, stream_id: str, owner: str, new_owner: str) -> bool:
        def claim() -> bool:
            with self._database.write() as db:
                cursor = db.execute(
                    "UPDATE streams SET owner = ?, expires_at = ? WHERE stream_id = ? AND owner = ? AND ended = 0",
                    (new_owner, self._clock() + ORPHAN_TTL_S, stream_id, owner),
                )
                return cursor.rowcount == 1

        return await asyncio.to_thread(claim)

    async def find_stream(self, tenant_id: str, name: str) -> StreamRecord | None:
        return await asyncio.to_thread(self._find, tenant_id, name)

    def _find(self, tenant_id: str, name: str) -> StreamRecord | None:
        with self._database.read() as db:
            row = db.execute(
                "SELECT s.* FROM stream_names n JOIN streams s ON s.stream_id = n.stream_id"
                " WHERE n.tenant_id = ? AND n.name = ? AND s.tenant_id = ? AND s.expires_at > ?",
                (tenant_id, name, tenant_id, self._clock()),
            ).fetchone()
        if row is None:
            return None
        return StreamRecord(
            stream_id=row["stream_id"],
            tenant_id=row["tenant_id"],
            owner=row["owner"],
            headers=json.loads(row["headers"]),
            first_seq=row["first_seq"],
            next_seq=row["next_seq"],
            ended=bool(row["ended"]),
            takeover=None if row["takeover"] is None else json.loads(row["takeover"]),
        )

    async def read_events(self, stream_id: str, after: int, limit: int) -> list[StreamEvent]:
        def read() -> list[StreamEvent]:
            with self._database.read() as db:
                rows = db.execute(
                    "SELECT seq, data FROM stream_events WHERE stream_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                    (stream_id, after, limit),
                ).fetchall()
            return [StreamEvent(seq=row["seq"], data=bytes(row["data"])) for row in rows]

        return await asyncio.to_thread(read)

    @staticmethod
    def _sweep(db: sqlite3.Connection, now: float) -> None:
        gone = "SELECT stream_id FROM streams WHERE expires_at <= ?"
        db.execute(f"DELETE FROM stream_events WHERE stream_id IN ({gone})", (now,))
        db.execute(f"DELETE FROM stream_names WHERE stream_id IN ({gone})", (now,))
        db.execute("DELETE FROM streams WHERE expires_at <= ?", (now,))
        db.execute("DELETE FROM records WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))

    # -- named records -------------------------------------------------------------------------------------------------
    async def put(self, namespace: str, key: str, value: dict[str, object], ttl_s: float | None = None) -> None:
        expires_at = None if ttl_s is None else self._clock() + ttl_s

        def put_it() -> None:
            with self._database.write() as db:
                db.execute(
                    "INSERT OR REPLACE INTO records (namespace, key, value, expires_at) VALUES (?, ?, ?, ?)",
                    (namespace, key, json.dumps(value), expires_at),
                )

        await asyncio.to_thread(put_it)

    async def delete(self, namespace: str, key: str) -> None:
        def delete_it() -> None:
            with self._database.write() as db:
                db.execute("DELETE FROM records WHERE namespace = ? AND key = ?", (namespace, key))

        await asyncio.to_thread(delete_it)

    async def records(self, namespace: str) -> dict[str, dict[str, object]]:
        def read() -> dict[str, dict[str, object]]:
            with self._database.read() as db:
                rows = db.execute(
                    "SELECT key, value FROM records WHERE namespace = ? AND (expires_at IS NULL OR expires_at > ?)",
                    (namespace, self._clock()),
                ).fetchall()
            return {row["key"]: json.loads(row["value"]) for row in rows}

        return await asyncio.to_thread(read)

    # -- shared budgets ------------------------------------------------------------------------------------------------
    async def take(self, bucket: TokenBucket) -> bool:
        def take_one() -> bool:
            now = self._clock()
            with self._database.write() as db:
                row = db.execute("SELECT tokens, at FROM buckets WHERE scope = ?", (bucket.scope,)).fetchone()
                tokens = bucket.capacity if row is None else row["tokens"] + max(0.0, now - row["at"]) * bucket.per_s
                tokens = min(bucket.capacity, tokens)
                taken = tokens >= 1.0
                db.execute(
                    "INSERT OR REPLACE INTO buckets (scope, tokens, at) VALUES (?, ?, ?)",
                    (bucket.scope, tokens - 1.0 if taken else tokens, now),
                )
                return taken

        return await asyncio.to_thread(take_one)

    # -- leases --------------------------------------------------------------------------------------------------------
    async def acquire_lease(self, scope: str, holder: str, limit: int, ttl_s: float) -> bool:
        def acquire() -> bool:
            now = self._clock()
            with self._database.write() as db:
                db.execute("DELETE FROM leases WHERE scope = ? AND expires_at <= ?", (scope, now))
                held = db.execute("SELECT 1 FROM leases WHERE scope = ? AND holder = ?", (scope, holder)).fetchone()
                count = db.execute("SELECT COUNT(*) FROM leases WHERE scope = ?", (scope,)).fetchone()[0]
                if held is None and count >= limit:
                    return False
                db.execute(
                    "INSERT OR REPLACE INTO leases (scope, holder, expires_at) VALUES (?, ?, ?)",
                    (scope, holder, now + ttl_s),
                )
                return True

        return await asyncio.to_thread(acquire)

    async def release_lease(self, scope: str, holder: str) -> None:
        def release() -> None:
            with self._database.write() as db:
                db.execute("DELETE FROM leases WHERE scope = ? AND holder = ?", (scope, holder))

        await asyncio.to_thread(release)

    async def aclose(self) -> None:
        self._database.close()

"""SQLite backend (the embedded default): one WAL-mode file in the data dir, schema versioned by `user_version`."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path

from shared.storage.base import ApiKeyRecord, Tenant
from shared.tiers import Tier

# Append-only: migration N+1 runs on a database at version N. Never edit a shipped migration.
# Statements run one by one inside one transaction (executescript would commit half-way).
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE tenants (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            tier TEXT NOT NULL,
            created_at TEXT NOT NULL
        )""",
        """CREATE TABLE api_keys (
            id TEXT PRIMARY KEY,
            tenant_id TEXT NOT NULL REFERENCES tenants(id),
            key_hash TEXT NOT NULL UNIQUE,
            label TEXT NOT NULL,
            created_at TEXT NOT NULL,
            revoked_at TEXT
        )""",
        "CREATE INDEX api_keys_tenant ON api_keys(tenant_id)",
    ],
]


def _now() -> datetime:
    return datetime.now(UTC)


class SQLiteStore:
    """Thread-safe: one connection guarded by a lock; WAL lets other processes read while we write."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._migrate()

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                version = self.schema_version
                for number, statements in enumerate(MIGRATIONS[version:], start=version + 1):
                    for statement in statements:
                        self._db.execute(statement)
                    self._db.execute(f"PRAGMA user_version={number}")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def create_tenant(self, name: str, tier: Tier) -> Tenant:
        tenant = Tenant(id=f"ten_{uuid.uuid4().hex}", name=name, tier=tier, created_at=_now())
        with self._lock:
            self._db.execute(
                "INSERT INTO tenants (id, name, tier, created_at) VALUES (?, ?, ?, ?)",
                (tenant.id, tenant.name, tenant.tier.value, tenant.created_at.isoformat()),
            )
        return tenant

    def get_tenant(self, tenant_id: str) -> Tenant | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM tenants WHERE id = ?", (tenant_id,)).fetchone()
        return None if row is None else Tenant(**dict(row))

    def add_api_key(self, tenant_id: str, key_hash: str, label: str) -> ApiKeyRecord:
        record = ApiKeyRecord(
            id=f"key_{uuid.uuid4().hex}", tenant_id=tenant_id, key_hash=key_hash, label=label, created_at=_now()
        )
        with self._lock:
            self._db.execute(
                "INSERT INTO api_keys (id, tenant_id, key_hash, label, created_at) VALUES (?, ?, ?, ?, ?)",
                (record.id, tenant_id, key_hash, label, record.created_at.isoformat()),
            )
        return record

    def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM api_keys WHERE key_hash = ?", (key_hash,)).fetchone()
        return None if row is None else ApiKeyRecord(**dict(row))

    def find_key_with_tenant(self, key_hash: str) -> tuple[ApiKeyRecord, Tenant] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT k.*, t.name AS t_name, t.tier AS t_tier, t.created_at AS t_created_at"
                " FROM api_keys k JOIN tenants t ON t.id = k.tenant_id WHERE k.key_hash = ?",
                (key_hash,),
            ).fetchone()
        if row is None:
            return None
        fields = dict(row)
        tenant = Tenant(
            id=fields["tenant_id"],
            name=fields.pop("t_name"),
            tier=fields.pop("t_tier"),
            created_at=fields.pop("t_created_at"),
        )
        return ApiKeyRecord(**fields), tenant

    def close(self) -> None:
        with self._lock:
            self._db.close()

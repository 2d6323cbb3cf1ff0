"""SQLite tenant store (the embedded default): tenants, their retention settings, and hashed API keys."""

from __future__ import annotations

import uuid
from pathlib import Path

from shared.storage.base import ApiKeyRecord, Tenant
from shared.storage.sqlite_db import SQLiteDatabase
from shared.storage.timestamps import utc_now
from shared.tiers import Tier


class SQLiteStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._database = SQLiteDatabase(path)

    @property
    def schema_version(self) -> int:
        return self._database.schema_version

    def create_tenant(self, name: str, tier: Tier) -> Tenant:
        tenant = Tenant(id=f"ten_{uuid.uuid4().hex}", name=name, tier=tier, created_at=utc_now())
        with self._database.write() as db:
            db.execute(
                "INSERT INTO tenants (id, name, tier, created_at) VALUES (?, ?, ?, ?)",
                (tenant.id, tenant.name, tenant.tier.value, tenant.created_at.isoformat()),
            )
        return tenant

    def get_tenant(self, tenant_id: str) -> Tenant | None:
        with self._database.read() as db:
            row = db.execute("SELECT * FROM tenants WHERE id = ?", (tenant_id,)).fetchone()
        return None if row is None else Tenant(**dict(row))

    def set_retention(self, tenant_id: str, *, retention_days: int | None, legal_hold: bool) -> Tenant | None:
        with self._database.write() as db:
            db.execute(
                "UPDATE tenants SET retention_days = ?, legal_hold = ? WHERE id = ?",
                (retention_days, int(legal_hold), tenant_id),
            )
        return self.get_tenant(tenant_id)

    def add_api_key(self, tenant_id: str, key_hash: str, label: str) -> ApiKeyRecord:
        record = ApiKeyRecord(
            id=f"key_{uuid.uuid4().hex}", tenant_id=tenant_id, key_hash=key_hash, label=label, created_at=utc_now()
        )
        with self._database.write() as db:
            db.execute(
                "INSERT INTO api_keys (id, tenant_id, key_hash, label, created_at) VALUES (?, ?, ?, ?, ?)",
                (record.id, tenant_id, key_hash, label, record.created_at.isoformat()),
            )
        return record

    def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        with self._database.read() as db:
            row = db.execute("SELECT * FROM api_keys WHERE key_hash = ?", (key_hash,)).fetchone()
        return None if row is None else ApiKeyRecord(**dict(row))

    def find_key_with_tenant(self, key_hash: str) -> tuple[ApiKeyRecord, Tenant] | None:
        with self._database.read() as db:
            row = db.execute(
                "SELECT k.*, t.name AS t_name, t.tier AS t_tier, t.created_at AS t_created_at,"
                " t.retention_days AS t_retention_days, t.legal_hold AS t_legal_hold"
                " FROM api_keys k JOIN tenants t ON t.id = k.tenant_id WHERE k.key_hash = ?",
                (key_hash,),
            ).fetchone()
        if row is None:
            return None
        fields = dict(row)
        tenant = Tenant(
            id=fields["tenant_id"],
            **{
                name: fields.pop(f"t_{name}") for name in ("name", "tier", "created_at", "retention_days", "legal_hold")
            },
        )
        return ApiKeyRecord(**fields), tenant

    def close(self) -> None:
        self._database.close()

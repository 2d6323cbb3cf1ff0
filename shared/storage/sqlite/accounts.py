"""SQLite account store (the embedded default): tenants and their settings, users, hashed API keys and admin keys."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared.fleet.tiers import LimitOverrides, SafetyOverrides, Tier
from shared.storage.accounts import AdminKeyRecord, ApiKeyRecord, Tenant, TenantChanges, TenantPurpose, User
from shared.storage.memory import Memory
from shared.storage.sqlite.db import SQLiteDatabase
from shared.storage.timestamps import utc_now

_TENANT_COLUMNS = (
    "name",
    "tier",
    "created_at",
    "retention_days",
    "legal_hold",
    "limits",
    "stripe_customer_id",
    "safety",
    "purpose",
    "instructions",
    "memory",
    "sharing_disabled",
)
# Overrides are stored as JSON, only the fields that are set.
_JSON_COLUMNS: dict[str, type[LimitOverrides] | type[SafetyOverrides] | type[Memory]] = {
    "limits": LimitOverrides,
    "safety": SafetyOverrides,
    "memory": Memory,
}


def _tenant(fields: dict[str, Any]) -> Tenant:
    for name, model in _JSON_COLUMNS.items():
        text = fields.pop(name, None)
        fields[name] = None if text is None else model.model_validate_json(text)
    return Tenant(**fields)


def _column_value(name: str, value: object) -> object:
    if name in _JSON_COLUMNS:
        return None if value is None else _JSON_COLUMNS[name].model_validate(value).model_dump_json(exclude_none=True)
    if name in ("legal_hold", "sharing_disabled"):
        return int(bool(value))
    return value


class SQLiteStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._database = SQLiteDatabase(path)

    @property
    def schema_version(self) -> int:
        return self._database.schema_version

    # Tenants

    def create_tenant(
        self,
        name: str,
        tier: Tier,
        *,
        safety: SafetyOverrides | None = None,
        purpose: TenantPurpose = TenantPurpose.CUSTOMER,
    ) -> Tenant:
        tenant = Tenant.new(name, tier, safety, purpose)
        with self._database.write() as db:
            db.execute(
                "INSERT INTO tenants (id, name, tier, created_at, safety, purpose) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    tenant.id,
                    tenant.name,
                    tenant.tier.value,
                    tenant.created_at.isoformat(),
                    _column_value("safety", tenant.safety),
                    tenant.purpose.value,
                ),
            )
        return tenant

    def get_tenant(self, tenant_id: str) -> Tenant | None:
        with self._database.read() as db:
            row = db.execute("SELECT * FROM tenants WHERE id = ?", (tenant_id,)).fetchone()
        return None if row is None else _tenant(dict(row))

    def list_tenants(self) -> list[Tenant]:
        with self._database.read() as db:
            rows = db.execute("SELECT * FROM tenants ORDER BY created_at, id").fetchall()
        return [_tenant(dict(row)) for row in rows]

    def update_tenant(self, tenant_id: str, changes: TenantChanges) -> Tenant | None:
        fields = changes.changed()
        if fields:
            assignments = ", ".join(f"{name} = ?" for name in fields)
            values = [_column_value(name, value) for name, value in fields.items()]
            with self._database.write() as db:
                db.execute(f"UPDATE tenants SET {assignments} WHERE id = ?", (*values, tenant_id))
        return self.get_tenant(tenant_id)

    def update_memory(self, tenant_id: str, change: Callable[[Memory], Memory]) -> Tenant | None:
        with self._database.write() as db:  # one write transaction: read, change, write (writers queue)
            row = db.execute("SELECT memory FROM tenants WHERE id = ?", (tenant_id,)).fetchone()
            if row is None:
                return None
            current = Memory.model_validate_json(row["memory"]) if row["memory"] else Memory()
            db.execute("UPDATE tenants SET memory = ? WHERE id = ?", (change(current).model_dump_json(), tenant_id))
        return self.get_tenant(tenant_id)

    # Users

    def create_user(self, tenant_id: str, email: str, name: str | None) -> User:
        user = User.new(tenant_id, email, name)
        try:
            with self._database.write() as db:
                db.execute(
                    "INSERT INTO users (id, tenant_id, email, name, created_at) VALUES (?, ?, ?, ?, ?)",
                    (user.id, tenant_id, email, name, user.created_at.isoformat()),
                )
        except sqlite3.IntegrityError as exc:
            raise ValueError(f"no tenant {tenant_id}, or it already has a user {email!r}") from exc
        return user

    def list_users(self, tenant_id: str) -> list[User]:
        with self._database.read() as db:
            rows = db.execute("SELECT * FROM users WHERE tenant_id = ? ORDER BY created_at, id", (tenant_id,))
            return [User(**dict(row)) for row in rows.fetchall()]

    # API keys

    def add_api_key(
        self, tenant_id: str, key_hash: str, label: str, *, user_id: str | None = None, hint: str = ""
    ) -> ApiKeyRecord:
        record = ApiKeyRecord.new(tenant_id, key_hash, label, user_id, hint)
        try:
            with self._database.write() as db:
                db.execute(
                    "INSERT INTO api_keys (id, tenant_id, key_hash, label, created_at, user_id, hint)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (record.id, tenant_id, key_hash, label, record.created_at.isoformat(), user_id, hint),
                )
        except sqlite3.IntegrityError as exc:
            raise ValueError("no such tenant or user, or a key with this hash exists") from exc
        return record

    def list_keys(self, tenant_id: str) -> list[ApiKeyRecord]:
        with self._database.read() as db:
            rows = db.execute("SELECT * FROM api_keys WHERE tenant_id = ? ORDER BY created_at, id", (tenant_id,))
            return [ApiKeyRecord(**dict(row)) for row in rows.fetchall()]

    def revoke_key(self, key_id: str, *, tenant_id: str | None = None) -> ApiKeyRecord | None:
        with self._database.write() as db:
            db.execute(
                "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? AND tenant_id = COALESCE(?, "
                "tenant_id)",
                (utc_now().isoformat(), key_id, tenant_id),
            )
            row = db.execute(
                "SELECT * FROM api_keys WHERE id = ? AND tenant_id = COALESCE(?, tenant_id)", (key_id, tenant_id)
            ).fetchone()
        return None if row is None else ApiKeyRecord(**dict(row))

    def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        with self._database.read() as db:
            row = db.execute("SELECT * FROM api_keys WHERE key_hash = ?", (key_hash,)).fetchone()
        return None if row is None else ApiKeyRecord(**dict(row))

    def find_key_with_tenant(self, key_hash: str) -> tuple[ApiKeyRecord, Tenant] | None:
        tenant_columns = ", ".join(f"t.{name} AS t_{name}" for name in _TENANT_COLUMNS)
        with self._database.read() as db:
            row = db.execute(
                f"SELECT k.*, {tenant_columns} FROM api_keys k JOIN tenants t ON t.id = k.tenant_id"
                " WHERE k.key_hash = ?",
                (key_hash,),
            ).fetchone()
        if row is None:
            return None
        fields = dict(row)
        tenant = _tenant({"id": fields["tenant_id"], **{name: fields.pop(f"t_{name}") for name in _TENANT_COLUMNS}})
        return ApiKeyRecord(**fields), tenant

    # Admin keys

    def add_admin_key(self, key_hash: str, label: str) -> AdminKeyRecord:
        record = AdminKeyRecord.new(key_hash, label)
        with self._database.write() as db:
            db.execute(
                "INSERT INTO admin_keys (id, key_hash, label, created_at) VALUES (?, ?, ?, ?)",
                (record.id, key_hash, label, record.created_at.isoformat()),
            )
        return record

    def find_admin_key(self, key_hash: str) -> AdminKeyRecord | None:
        with self._database.read() as db:
            row = db.execute("SELECT * FROM admin_keys WHERE key_hash = ?", (key_hash,)).fetchone()
        return None if row is None else AdminKeyRecord(**dict(row))

    def close(self) -> None:
        self._database.close()

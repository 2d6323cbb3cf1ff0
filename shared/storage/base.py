"""The storage contract for tenants and API keys; each backend module implements it."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from pydantic import BaseModel

from shared.tiers import Tier


class Tenant(BaseModel):
    id: str
    name: str
    tier: Tier
    created_at: datetime
    # Retention override in days of inactivity (None: the tier's default) and legal hold (never swept while set).
    retention_days: int | None = None
    legal_hold: bool = False


class ApiKeyRecord(BaseModel):
    id: str
    tenant_id: str
    key_hash: str
    label: str
    created_at: datetime
    revoked_at: datetime | None = None


class TenantStore(Protocol):
    """Tenants and their API keys. Keys are held only as SHA-256 hashes."""

    def create_tenant(self, name: str, tier: Tier) -> Tenant: ...

    def get_tenant(self, tenant_id: str) -> Tenant | None: ...

    def set_retention(self, tenant_id: str, *, retention_days: int | None, legal_hold: bool) -> Tenant | None:
        """Set a tenant's retention override and legal hold; None if there is no such tenant."""
        ...

    def add_api_key(self, tenant_id: str, key_hash: str, label: str) -> ApiKeyRecord: ...

    def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        """The key record with this hash, revoked or not; None if there is none."""
        ...

    def find_key_with_tenant(self, key_hash: str) -> tuple[ApiKeyRecord, Tenant] | None:
        """The key record and its tenant in one read (the per-request auth path)."""
        ...

    def close(self) -> None: ...

"""The storage contract for accounts: tenants, their users, API keys and admin keys; each backend implements it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Protocol

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from shared.fleet.tiers import LimitOverrides, SafetyOverrides, Tier
from shared.storage.conversations import MAX_INSTRUCTIONS_CHARS
from shared.storage.memory import Memory
from shared.storage.timestamps import utc_now


def _known_safety_fields(value: object) -> object:
    # SafetyOverrides ignores unknown keys; in a request a misspelt switch must be refused, not silently dropped.
    if isinstance(value, dict) and (unknown := sorted(set(value) - set(SafetyOverrides.model_fields))):
        raise ValueError(f"unknown safety settings: {', '.join(map(str, unknown))}")
    return value


# Safety overrides as a caller sends them (admin API, CLI): only the known switches.
SafetyChoices = Annotated[SafetyOverrides, BeforeValidator(_known_safety_fields)]


class TenantPurpose(StrEnum):
    CUSTOMER = "customer"
    EVAL = "eval"  # the eval job's tenants: its traffic is excluded from customer usage and billing


class Tenant(BaseModel):
    id: str
    name: str
    tier: Tier
    created_at: datetime
    # Retention override in days of inactivity (None: the tier's default) and legal hold (never swept while set).
    retention_days: int | None = None
    legal_hold: bool = False
    # Per-tenant exceptions to the tier's rate limits (None: the tier's).
    limits: LimitOverrides | None = None
    # The Stripe customer its usage is metered to (None: ledger only, not billed through Stripe).
    stripe_customer_id: str | None = None
    # Per-tenant safety choices (None: the tier's); only an enterprise tier applies them (see tiers.safety_for).
    safety: SafetyOverrides | None = None
    # What the tenant is for: a customer, or the eval job's own traffic (never billed; fixed at creation).
    purpose: TenantPurpose = TenantPurpose.CUSTOMER
    # The account's custom instructions for every conversation it stores (functions/chat/instructions.py); None: none.
    instructions: str | None = Field(default=None, max_length=MAX_INSTRUCTIONS_CHARS)
    # The facts the account asked to be remembered across conversations (shared/storage/memory.py); None: never set.
    memory: Memory | None = None
    # Share links off (an operator's choice for the tenant): none can be made, and its existing links are 404s.
    sharing_disabled: bool = False

    @classmethod
    def new(
        cls,
        name: str,
        tier: Tier,
        safety: SafetyOverrides | None = None,
        purpose: TenantPurpose = TenantPurpose.CUSTOMER,
    ) -> Tenant:
        return cls(
            id=f"ten_{uuid.uuid4().hex}", name=name, tier=tier, created_at=utc_now(), safety=safety, purpose=purpose
        )

    @property
    def billable(self) -> bool:
        """Whether its usage is customer usage (sent to billing); eval tenants' usage stays in the ledger only."""
        return self.purpose is TenantPurpose.CUSTOMER


class TenantChanges(BaseModel):
    """A partial update of a tenant: only the fields that were set are changed (set one to None to clear it)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=200)
    tier: Tier | None = None
    retention_days: int | None = Field(default=None, ge=1)
    legal_hold: bool | None = None
    limits: LimitOverrides | None = None
    stripe_customer_id: str | None = Field(default=None, pattern=r"^cus_[A-Za-z0-9]+$")
    safety: SafetyChoices | None = None
    instructions: str | None = Field(default=None, max_length=MAX_INSTRUCTIONS_CHARS)
    sharing_disabled: bool | None = None

    def changed(self) -> dict[str, object]:
        """The fields to write, by name (`None` means clear it; `name`, `tier`, `legal_hold` and `sharing_disabled`
        cannot be cleared)."""
        fields = self.model_dump(include=self.model_fields_set)
        for required in ("name", "tier", "legal_hold", "sharing_disabled"):
            if required in fields and fields[required] is None:
                raise ValueError(f"{required} cannot be cleared")
        return fields


class User(BaseModel):
    id: str
    tenant_id: str
    email: str
    name: str | None = None
    created_at: datetime

    @classmethod
    def new(cls, tenant_id: str, email: str, name: str | None) -> User:
        return cls(id=f"usr_{uuid.uuid4().hex}", tenant_id=tenant_id, email=email, name=name, created_at=utc_now())


class ApiKeyRecord(BaseModel):
    id: str
    tenant_id: str
    key_hash: str
    label: str
    created_at: datetime
    revoked_at: datetime | None = None
    user_id: str | None = None
    # The key's first characters, to tell keys apart in a listing ("fc-AbCd…"); never enough to use it.
    hint: str = ""

    @classmethod
    def new(cls, tenant_id: str, key_hash: str, label: str, user_id: str | None, hint: str) -> ApiKeyRecord:
        return cls(
            id=f"key_{uuid.uuid4().hex}",
            tenant_id=tenant_id,
            key_hash=key_hash,
            label=label,
            created_at=utc_now(),
            user_id=user_id,
            hint=hint,
        )


class AdminKeyRecord(BaseModel):
    id: str
    key_hash: str
    label: str
    created_at: datetime
    revoked_at: datetime | None = None

    @classmethod
    def new(cls, key_hash: str, label: str) -> AdminKeyRecord:
        return cls(id=f"adm_{uuid.uuid4().hex}", key_hash=key_hash, label=label, created_at=utc_now())


class TenantStore(Protocol):
    """Tenants, users and API keys. Keys (tenant and admin) are held only as SHA-256 hashes."""

    def create_tenant(
        self,
        name: str,
        tier: Tier,
        *,
        safety: SafetyOverrides | None = None,
        purpose: TenantPurpose = TenantPurpose.CUSTOMER,
    ) -> Tenant:
        """A new tenant (with its safety overrides and purpose, in the same write)."""
        ...

    def get_tenant(self, tenant_id: str) -> Tenant | None: ...

    def list_tenants(self) -> list[Tenant]:
        """Every tenant, oldest first."""
        ...

    def update_tenant(self, tenant_id: str, changes: TenantChanges) -> Tenant | None:
        """Apply the set fields of `changes`; the updated tenant, or None if there is no such tenant."""
        ...

    def update_memory(self, tenant_id: str, change: Callable[[Memory], Memory]) -> Tenant | None:
        """Replace the tenant's memory with `change(current)` atomically (a concurrent change is never lost: it is
        applied again on top); the updated tenant, or None if there is no such tenant. `change` may raise to refuse
        (nothing is written)."""
        ...

    def create_user(self, tenant_id: str, email: str, name: str | None) -> User:
        """A user of an existing tenant; an email is unique within its tenant (ValueError if taken)."""
        ...

    def list_users(self, tenant_id: str) -> list[User]: ...

    def add_api_key(
        self, tenant_id: str, key_hash: str, label: str, *, user_id: str | None = None, hint: str = ""
    ) -> ApiKeyRecord: ...

    def list_keys(self, tenant_id: str) -> list[ApiKeyRecord]:
        """The tenant's keys, revoked ones included, oldest first."""
        ...

    def revoke_key(self, key_id: str, *, tenant_id: str | None = None) -> ApiKeyRecord | None:
        """Revoke a key (idempotent: an already revoked key keeps its first revocation time).

        With `tenant_id`, only that tenant's key; None if there is no such key.
        """
        ...

    def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        """The key record with this hash, revoked or not; None if there is none."""
        ...

    def find_key_with_tenant(self, key_hash: str) -> tuple[ApiKeyRecord, Tenant] | None:
        """The key record and its tenant in one read (the per-request auth path)."""
        ...

    def add_admin_key(self, key_hash: str, label: str) -> AdminKeyRecord: ...

    def find_admin_key(self, key_hash: str) -> AdminKeyRecord | None: ...

    def close(self) -> None: ...

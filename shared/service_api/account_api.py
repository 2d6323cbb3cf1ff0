"""Wire models of the account endpoints: the admin API (`/admin/v1`), sessions (`/v1/session`) and usage
(`/v1/usage`). Times are Unix seconds; key material appears only in the one response that creates a key."""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from shared.errors import InvalidRequestError
from shared.fleet.tables import list_price, safety_for
from shared.fleet.tiers import LimitOverrides, SafetyOverrides, SafetyPolicy, Tier, TierLimits
from shared.storage.accounts import AdminKeyRecord, ApiKeyRecord, SafetyChoices, Tenant, TenantPurpose, User
from shared.storage.ledger import PriceClass, UsageRow
from shared.storage.safety_audit import SafetyAction, SafetyAuditRecord, SafetyDetector, SafetyLayer


def _unix(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp())


class TenantObject(BaseModel):
    id: str
    object: Literal["tenant"] = "tenant"
    name: str
    tier: Tier
    created_at: int
    retention_days: int | None
    legal_hold: bool
    limits: TierLimits  # effective: the tier's with the tenant's overrides
    overrides: LimitOverrides | None
    stripe_customer_id: str | None
    safety: SafetyPolicy  # effective: the tier's, with an enterprise tenant's overrides
    safety_overrides: SafetyOverrides | None
    purpose: TenantPurpose  # "eval": the eval job's tenant, excluded from billing
    sharing_disabled: bool = False  # no share links: none made, existing ones 404 (docs/conversations.md)

    @classmethod
    def of(cls, tenant: Tenant, limits: TierLimits) -> TenantObject:
        return cls(
            id=tenant.id,
            name=tenant.name,
            tier=tenant.tier,
            created_at=_unix(tenant.created_at) or 0,
            retention_days=tenant.retention_days,
            legal_hold=tenant.legal_hold,
            limits=limits,
            overrides=tenant.limits,
            stripe_customer_id=tenant.stripe_customer_id,
            safety=safety_for(tenant.tier, tenant.safety),
            safety_overrides=tenant.safety,
            purpose=tenant.purpose,
            sharing_disabled=tenant.sharing_disabled,
        )


class TenantList(BaseModel):
    object: Literal["list"] = "list"
    data: list[TenantObject]


class TenantCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    tier: Tier
    key_label: str | None = Field(default=None, max_length=200)  # also mint a first API key
    safety: SafetyChoices | None = None  # enterprise only (see check_safety_tier)
    purpose: TenantPurpose = TenantPurpose.CUSTOMER  # "eval" for the eval job's tenants (never billed; fixed)


def check_safety_tier(tier: Tier, safety: SafetyOverrides | None) -> None:
    """Safety overrides are an enterprise option: setting them on a tenant whose tier (after the change) is another
    is a 400 on `safety`. Clearing them (None) is always allowed."""
    if safety is not None and tier is not Tier.ENTERPRISE:
        raise InvalidRequestError(
            f"Safety overrides are only for enterprise tenants; this tenant's tier would be '{tier.value}'.",
            param="safety",
        )


class UserObject(BaseModel):
    id: str
    object: Literal["user"] = "user"
    tenant_id: str
    email: str
    name: str | None
    created_at: int

    @classmethod
    def of(cls, user: User) -> UserObject:
        return cls(
            id=user.id,
            tenant_id=user.tenant_id,
            email=user.email,
            name=user.name,
            created_at=_unix(user.created_at) or 0,
        )


class UserList(BaseModel):
    object: Literal["list"] = "list"
    data: list[UserObject]


class UserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    email: str = Field(min_length=3, max_length=320, pattern=r"^[^@\s]+@[^@\s]+$")
    name: str | None = Field(default=None, max_length=200)


class ApiKeyObject(BaseModel):
    id: str
    object: Literal["api_key"] = "api_key"
    tenant_id: str
    user_id: str | None
    label: str
    hint: str
    created_at: int
    revoked_at: int | None

    @classmethod
    def of(cls, record: ApiKeyRecord) -> ApiKeyObject:
        return cls(
            id=record.id,
            tenant_id=record.tenant_id,
            user_id=record.user_id,
            label=record.label,
            hint=record.hint,
            created_at=_unix(record.created_at) or 0,
            revoked_at=_unix(record.revoked_at),
        )


class ApiKeyCreated(ApiKeyObject):
    key: str  # shown once


class ApiKeyList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ApiKeyObject]


class ApiKeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str = Field(default="api key", min_length=1, max_length=200)
    user_id: str | None = None


class TenantCreated(BaseModel):
    tenant: TenantObject
    api_key: ApiKeyCreated | None


class SafetyEventObject(BaseModel):
    """One safety audit record: a blocked request or a halted stream."""

    object: Literal["safety_event"] = "safety_event"
    request_id: str
    tenant_id: str
    key_id: str | None
    created_at: int
    layer: SafetyLayer
    detector: SafetyDetector
    category: str
    score: float
    policy_version: str
    action: SafetyAction
    model: str
    content: str | None  # a PII-redacted excerpt, only where the tenant's policy keeps one
    expires_at: int | None

    @classmethod
    def of(cls, record: SafetyAuditRecord) -> SafetyEventObject:
        return cls(
            **record.model_dump(exclude={"at", "expires_at"}),
            created_at=_unix(record.at) or 0,
            expires_at=_unix(record.expires_at),
        )


class SafetyEventList(BaseModel):
    object: Literal["list"] = "list"
    data: list[SafetyEventObject]  # newest first
    has_more: bool  # more (older) events in the range
    # With has_more: the exact time of the oldest event shown (ISO 8601); pass it as `end` for the next page.
    next_end: str | None = None


class AdminKeyObject(BaseModel):
    id: str
    label: str
    created_at: int

    @classmethod
    def of(cls, record: AdminKeyRecord) -> AdminKeyObject:
        return cls(id=record.id, label=record.label, created_at=_unix(record.created_at) or 0)


class Brownout(BaseModel):
    """`PUT /admin/v1/brownout`: `mode` "on" or "off" forces brownout in every pool, "auto" gives it back to the load
    control loop; the older `{"active": true|false}` still works (forced on or off)."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["auto", "on", "off"] | None = None
    active: StrictBool | None = None  # strict: `0` or "yes" is a 400, never read as a bool

    @model_validator(mode="after")
    def _one_of(self) -> Brownout:
        if (self.mode is None) == (self.active is None):
            raise ValueError("give either 'mode' (auto, on or off) or 'active'")
        return self

    def chosen_mode(self) -> Literal["auto", "on", "off"]:
        if self.mode is not None:
            return self.mode
        return "on" if self.active else "off"


class BrownoutState(BaseModel):
    """Brownout now: the mode (auto: load decides), whether any pool is in brownout, and each pool."""

    mode: Literal["auto", "on", "off"]
    active: bool
    pools: dict[str, bool]


class SessionLogin(BaseModel):
    model_config = ConfigDict(extra="forbid")

    api_key: str = Field(min_length=1, max_length=200)


class SessionObject(BaseModel):
    object: Literal["session"] = "session"
    tenant: TenantObject
    key: ApiKeyObject
    expires_at: int | None  # None when authenticated by a bearer key rather than a session cookie
    # The gateway's own tools this caller may ask for here (its tier's, that run on this deployment): the web chat
    # offers the code interpreter where `python` is one.
    server_tools: list[str] = []


class UsageTotals(BaseModel):
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    # The tokens at the model's list prices (GET /v1/models `pricing`); null where no price is set. A total sums
    # the priced models only.
    cost_usd: float | None = None

    def add(self, other: UsageTotals) -> None:
        self.requests += other.requests
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_tokens += other.cached_tokens
        if other.cost_usd is not None:
            self.cost_usd = round((self.cost_usd or 0.0) + other.cost_usd, 6)


class UsageDay(UsageTotals):
    date: date
    model: str
    price_class: PriceClass = "standard"  # `batch`: lines of batches, at the batch price

    @classmethod
    def of(cls, row: UsageRow) -> UsageDay:
        pricing = list_price(row.model)
        if pricing is not None and row.price_class == "batch":
            pricing = pricing.for_batch()
        cost = pricing.cost_usd(row.prompt_tokens, row.completion_tokens, row.cached_tokens) if pricing else None
        return cls(date=row.day, **row.model_dump(exclude={"day"}), cost_usd=None if cost is None else round(cost, 6))


class UsageReport(BaseModel):
    object: Literal["usage"] = "usage"
    tenant_id: str
    start: int
    end: int
    data: list[UsageDay]
    totals: UsageTotals
    by_model: dict[str, UsageTotals]

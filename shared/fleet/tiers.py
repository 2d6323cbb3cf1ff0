"""The tier table: which model pools each tier may use, its rate limits and message cap, and how long chats are kept.

BUILTIN_TIERS holds the defaults; the tiers in force are shared/fleet/tables.py's snapshot (the operator config
file, docs/configuration.md, replaces it whole at start and on a hot reload), which `policy_for`/`limits_for`/
`safety_for` there read.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from shared.fleet.pools import BUILTIN_POOLS


class Tier(StrEnum):
    FREE = "free"
    PLUS = "plus"
    ENTERPRISE = "enterprise"


class TierLimits(BaseModel):
    """Admission limits. RPM/TPM hold per API key and per tenant (a tenant's keys share the tenant's budget)."""

    key_rpm: int = Field(ge=1)
    key_tpm: int = Field(ge=1)
    tenant_rpm: int = Field(ge=1)
    tenant_tpm: int = Field(ge=1)
    # At most `message_cap` chat requests per tenant in any rolling `message_window_s` (None: no cap).
    message_cap: int | None = Field(default=None, ge=1)
    message_window_s: int = Field(default=3 * 3600, ge=60)
    # Completion budget: a request without max_tokens gets this; a larger one is capped to it.
    max_output_tokens: int = Field(ge=1)
    # The cap while the fleet is overloaded (brownout).
    brownout_max_output_tokens: int = Field(ge=1)
    # Files (docs/files.md): how many files a tenant may keep, the largest upload, and all its files' bytes together.
    max_files: int = Field(default=1000, ge=0)
    max_file_bytes: int = Field(default=32 * 1024 * 1024, ge=1)
    max_file_storage_bytes: int = Field(default=1024 * 1024 * 1024, ge=1)


class LimitOverrides(BaseModel):
    """Per-tenant exceptions to the tier's limits (enterprise contracts); unset fields keep the tier's value."""

    key_rpm: int | None = Field(default=None, ge=1)
    key_tpm: int | None = Field(default=None, ge=1)
    tenant_rpm: int | None = Field(default=None, ge=1)
    tenant_tpm: int | None = Field(default=None, ge=1)
    message_cap: int | None = Field(default=None, ge=1)
    max_output_tokens: int | None = Field(default=None, ge=1)
    max_files: int | None = Field(default=None, ge=0)
    max_file_bytes: int | None = Field(default=None, ge=1)
    max_file_storage_bytes: int | None = Field(default=None, ge=1)


class SafetyPolicy(BaseModel):
    """What the safety pipeline does for a tier (enterprise tenants may change the first two, see SafetyOverrides)."""

    # Halt a stream whose output contains PII (emails, phones, cards, secrets, IPs) instead of sending it.
    block_outbound_pii: bool = False
    # Keep a PII-redacted excerpt of the blocked/halted text in the safety audit record (else no content at all).
    audit_raw_content: bool = False
    # Safety audit records are kept this many days, then swept (legal hold keeps them).
    audit_retention_days: int = Field(ge=1)


class SafetyOverrides(BaseModel):
    """Per-tenant safety choices; only enterprise tenants may set them (unset: the tier's)."""

    block_outbound_pii: bool | None = None
    audit_raw_content: bool | None = None


class TierSlo(BaseModel):
    """Latency objectives of a tier, as streamed requests see them at the gateway (the eval latency suite gates on
    them; the reliability control loop will drive admission and brownout from them).

    The values in BUILTIN_TIERS are sized for the embedded stack (SmolLM2-135M on a few CPU cores, short prompts): a
    deployment on GPUs should hold far tighter ones, set in the operator config file (docs/configuration.md).
    """

    ttft_p95_s: float = Field(gt=0)  # time to the first content token, 95th percentile
    inter_token_p95_s: float = Field(gt=0)  # gap between content chunks, 95th percentile


class TierPolicy(BaseModel):
    tier: Tier
    limits: TierLimits
    safety: SafetyPolicy
    pools: tuple[str, ...]
    default_pool: str
    # Conversations expire after this many days without a new turn; None: kept until deleted (enterprise sets
    # its own per tenant, see Tenant.retention_days).
    retention_days: int | None
    slo: TierSlo
    # The prompt/result cache (docs/result-cache.md): seconds a complete deterministic answer is served again to the
    # same tenant; 0: off. Enterprise is off by default: a cached answer is a copy of content outside the tenant's own
    # retention and legal-hold controls (an operator may turn it on, FLEETCHAT_RESULT_CACHE_TTL_S).
    result_cache_ttl_s: int = Field(default=0, ge=0, le=7 * 24 * 3600)


BUILTIN_TIERS: dict[Tier, TierPolicy] = {
    Tier.FREE: TierPolicy(
        tier=Tier.FREE,
        limits=TierLimits(
            key_rpm=20,
            key_tpm=40_000,
            tenant_rpm=20,
            tenant_tpm=40_000,
            message_cap=40,
            message_window_s=3 * 3600,
            max_output_tokens=1024,
            brownout_max_output_tokens=256,
        ),
        safety=SafetyPolicy(audit_retention_days=30),
        pools=("mini",),
        default_pool="mini",
        retention_days=30,
        slo=TierSlo(ttft_p95_s=3.0, inter_token_p95_s=0.3),  # local values (see TierSlo)
        result_cache_ttl_s=600,  # FAQ-style repeats: ten minutes spares the shared free pool most of them
    ),
    Tier.PLUS: TierPolicy(
        tier=Tier.PLUS,
        limits=TierLimits(
            key_rpm=300,
            key_tpm=400_000,
            tenant_rpm=600,
            tenant_tpm=1_000_000,
            max_output_tokens=4096,
            brownout_max_output_tokens=1024,
        ),
        safety=SafetyPolicy(audit_retention_days=90),
        pools=("flagship", "mini"),
        default_pool="flagship",
        retention_days=90,
        slo=TierSlo(ttft_p95_s=2.0, inter_token_p95_s=0.25),  # local values (see TierSlo)
        result_cache_ttl_s=3600,  # apps replaying deterministic prompts (tests, evals, agents' fixed steps)
    ),
    Tier.ENTERPRISE: TierPolicy(
        tier=Tier.ENTERPRISE,
        limits=TierLimits(
            key_rpm=3_000,
            key_tpm=4_000_000,
            tenant_rpm=10_000,
            tenant_tpm=20_000_000,
            max_output_tokens=8192,
            brownout_max_output_tokens=2048,
        ),
        safety=SafetyPolicy(audit_retention_days=365),
        pools=("flagship", "mini"),
        default_pool="flagship",
        retention_days=None,
        slo=TierSlo(ttft_p95_s=1.5, inter_token_p95_s=0.25),  # local values (see TierSlo)
    ),
}

assert all(p in BUILTIN_POOLS for policy in BUILTIN_TIERS.values() for p in policy.pools), (
    "tier table names an unknown pool"
)

"""The tier table: which model pools each tier may use, its rate limits and message cap, and how long chats are kept.

The built-in tiers are stated in builtin.yaml; the tiers in force are shared/fleet/tables.py's snapshot (the operator
config file, docs/configuration.md, replaces it whole at start and on a hot reload), which `policy_for`/`limits_for`/
`safety_for` there read.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from shared.wire.server_tool_runs import SERVER_TOOL_NAMES, ServerToolName


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
    # Choices per request (`n`): each is a sequence on the GPU while the request holds one place in its pool.
    max_choices: int = Field(default=8, ge=1, le=128)


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
    max_choices: int | None = Field(default=None, ge=1, le=128)


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

    The built-in values (builtin.yaml) are sized for the embedded stack (SmolLM2-135M on a few CPU cores, short
    prompts): a deployment on GPUs should hold far tighter ones, set in the operator config file
    (docs/configuration.md).
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
    # The gateway's own tools this tier may ask for (`server_tools`, docs/server-tools.md); a request naming another
    # is a 403. The web chat offers the code interpreter where `python` is among them.
    server_tools: tuple[ServerToolName, ...] = SERVER_TOOL_NAMES

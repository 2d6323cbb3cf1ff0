"""The tier table: which model pools each tier may use, which it gets by default, and how long chats are kept."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel

from shared.pools import POOLS


class Tier(StrEnum):
    FREE = "free"
    PLUS = "plus"
    ENTERPRISE = "enterprise"


class TierPolicy(BaseModel):
    tier: Tier
    pools: tuple[str, ...]
    default_pool: str
    # Conversations expire after this many days without a new turn; None: kept until deleted (enterprise sets
    # its own per tenant, see Tenant.retention_days).
    retention_days: int | None


TIER_TABLE: dict[Tier, TierPolicy] = {
    Tier.FREE: TierPolicy(tier=Tier.FREE, pools=("mini",), default_pool="mini", retention_days=30),
    Tier.PLUS: TierPolicy(tier=Tier.PLUS, pools=("flagship", "mini"), default_pool="flagship", retention_days=90),
    Tier.ENTERPRISE: TierPolicy(
        tier=Tier.ENTERPRISE, pools=("flagship", "mini"), default_pool="flagship", retention_days=None
    ),
}

assert all(p in POOLS for policy in TIER_TABLE.values() for p in policy.pools), "tier table names an unknown pool"


def policy_for(tier: Tier) -> TierPolicy:
    return TIER_TABLE[tier]

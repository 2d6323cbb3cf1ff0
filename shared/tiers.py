"""The tier table: which model pools each tier may use and which it gets by default."""

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


TIER_TABLE: dict[Tier, TierPolicy] = {
    Tier.FREE: TierPolicy(tier=Tier.FREE, pools=("mini",), default_pool="mini"),
    Tier.PLUS: TierPolicy(tier=Tier.PLUS, pools=("flagship", "mini"), default_pool="flagship"),
    Tier.ENTERPRISE: TierPolicy(tier=Tier.ENTERPRISE, pools=("flagship", "mini"), default_pool="flagship"),
}

assert all(p in POOLS for policy in TIER_TABLE.values() for p in policy.pools), "tier table names an unknown pool"


def policy_for(tier: Tier) -> TierPolicy:
    return TIER_TABLE[tier]

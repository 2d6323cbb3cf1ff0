"""Retention policy: when a tenant's conversation expires, from the tier table, the tenant's override and legal hold."""

from __future__ import annotations

from datetime import datetime, timedelta

from shared.fleet.tables import policy_for
from shared.storage.accounts import Tenant


def retention_days(tenant: Tenant) -> int | None:
    """Days of inactivity a conversation is kept; None: until deleted. Legal hold keeps everything."""
    if tenant.legal_hold:
        return None
    if tenant.retention_days is not None:
        return tenant.retention_days
    return policy_for(tenant.tier).retention_days


def expiry_for(tenant: Tenant, last_active: datetime) -> datetime | None:
    days = retention_days(tenant)
    return None if days is None else last_active + timedelta(days=days)

"""Account operations shared by the admin CLI, the admin API and the local default tenant: mint keys, show them once."""

from __future__ import annotations

from pydantic import BaseModel

from shared.api_keys import hash_api_key, new_api_key
from shared.errors import NotFoundError
from shared.fleet.tiers import Tier
from shared.storage.accounts import AdminKeyRecord, ApiKeyRecord, Tenant, TenantPurpose, TenantStore

HINT_CHARS = 7  # "fc-" and four characters: enough to tell keys apart, useless to an attacker


class MintedKey(BaseModel):
    """A new key and its record. `key` is shown to the caller once and never stored or logged."""

    key: str
    record: ApiKeyRecord


class MintedAdminKey(BaseModel):
    key: str
    record: AdminKeyRecord


def key_hint(key: str) -> str:
    return key[:HINT_CHARS] + "…"


def mint_api_key(store: TenantStore, tenant_id: str, label: str, *, user_id: str | None = None) -> MintedKey:
    if store.get_tenant(tenant_id) is None:
        raise NotFoundError(f"No tenant found with id '{tenant_id}'.", param="tenant_id")
    if user_id is not None and all(u.id != user_id for u in store.list_users(tenant_id)):
        raise NotFoundError(f"Tenant '{tenant_id}' has no user '{user_id}'.", param="user_id")
    key = new_api_key()
    record = store.add_api_key(tenant_id, hash_api_key(key), label, user_id=user_id, hint=key_hint(key))
    return MintedKey(key=key, record=record)


def create_tenant_with_key(
    store: TenantStore, name: str, tier: Tier, label: str, *, purpose: TenantPurpose = TenantPurpose.CUSTOMER
) -> tuple[Tenant, MintedKey]:
    tenant = store.create_tenant(name, tier, purpose=purpose)
    return tenant, mint_api_key(store, tenant.id, label)


def mint_admin_key(store: TenantStore, label: str) -> MintedAdminKey:
    key = new_api_key()
    return MintedAdminKey(key=key, record=store.add_admin_key(hash_api_key(key), label))

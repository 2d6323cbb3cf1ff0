"""The local default tenant and admin key: created on first start; each key lives in a 0600 file, the store keeps only
its hash."""

from __future__ import annotations

from pathlib import Path

from functions.accounts.operations import create_tenant_with_key, mint_admin_key
from functions.accounts.private_files import read_private, write_private
from shared.api_keys import hash_api_key
from shared.fleet.tiers import Tier
from shared.storage.accounts import TenantStore

LOCAL_TENANT_NAME = "local"


def ensure_local_key(store: TenantStore, key_path: Path, tier: Tier) -> str:
    """Return the local API key, minting tenant and key if the file is missing or its key is unknown to the store."""
    key = read_private(key_path)
    if key is not None:
        record = store.find_key(hash_api_key(key))
        if record is not None and record.revoked_at is None:
            return key
    _, minted = create_tenant_with_key(store, LOCAL_TENANT_NAME, tier, label="local default")
    write_private(key_path, minted.key + "\n")
    return minted.key


def ensure_local_admin_key(store: TenantStore, key_path: Path) -> str:
    """Return the local admin key (for `/admin/v1`), minting it if the file is missing or its key is unknown."""
    key = read_private(key_path)
    if key is not None:
        record = store.find_admin_key(hash_api_key(key))
        if record is not None and record.revoked_at is None:
            return key
    minted = mint_admin_key(store, label="local admin")
    write_private(key_path, minted.key + "\n")
    return minted.key

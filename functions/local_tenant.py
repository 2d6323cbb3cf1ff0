"""The local default tenant: created on first start; its key lives in a 0600 file, the store keeps only its hash."""

from __future__ import annotations

import os
from pathlib import Path

from shared.api_keys import hash_api_key, new_api_key
from shared.storage.base import TenantStore
from shared.tiers import Tier

LOCAL_TENANT_NAME = "local"


def ensure_local_key(store: TenantStore, key_path: Path, tier: Tier) -> str:
    """Return the local API key, minting tenant and key if the file is missing or its key is unknown to the store."""
    if key_path.is_file():
        key = key_path.read_text().strip()
        record = store.find_key(hash_api_key(key)) if key else None
        if record is not None and record.revoked_at is None:
            return key
    tenant = store.create_tenant(LOCAL_TENANT_NAME, tier)
    key = new_api_key()
    store.add_api_key(tenant.id, hash_api_key(key), label="local default")
    key_path.parent.mkdir(parents=True, exist_ok=True)
    # Create with 0600 from the start so the key is never readable by others, not even briefly.
    tmp = key_path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    os.replace(tmp, key_path)
    return key

"""Bearer-key authentication: the key's SHA-256 hash is looked up; the tenant it belongs to is the caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from shared.api_keys import hash_api_key, hashes_match
from shared.errors import AuthenticationError
from shared.storage.base import Tenant, TenantStore

MISSING_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer "
    "auth (i.e. Authorization: Bearer YOUR_KEY)."
)


def bearer_token(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError(MISSING_KEY, code=None)
    return token.strip()


def authenticate(store: TenantStore, key: str) -> Tenant:
    digest = hash_api_key(key)
    found = store.find_key_with_tenant(digest)
    if found is None:
        raise AuthenticationError("Incorrect API key provided.")
    record, tenant = found
    if not hashes_match(record.key_hash, digest) or record.revoked_at is not None:
        raise AuthenticationError("Incorrect API key provided.")
    return tenant


async def current_tenant(request: Request) -> Tenant:
    return authenticate(request.app.state.store, bearer_token(request))


CurrentTenant = Annotated[Tenant, Depends(current_tenant)]

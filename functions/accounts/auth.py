"""Who is calling: a bearer API key (the SDK) or a signed session cookie (the web chat), looked up by the key's hash.

Admin endpoints take a separate admin key. Store reads run in a worker thread: the DynamoDB store blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from anyio import to_thread
from fastapi import Depends, Request

from functions.accounts.sessions import CSRF_HEADER, CSRF_VALUE, SAFE_METHODS, SESSION_COOKIE, SessionSigner
from shared.api_keys import hash_api_key, hashes_match
from shared.errors import AuthenticationError, PermissionDeniedError
from shared.storage.accounts import AdminKeyRecord, ApiKeyRecord, Tenant, TenantStore

MISSING_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer "
    "auth (i.e. Authorization: Bearer YOUR_KEY)."
)
INCORRECT_KEY = "Incorrect API key provided."


@dataclass(frozen=True)
class Caller:
    tenant: Tenant
    key: ApiKeyRecord
    via_session: bool = False


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError(MISSING_KEY, code=None)
    return token.strip()


def authenticate_hash(store: TenantStore, digest: str) -> tuple[ApiKeyRecord, Tenant]:
    found = store.find_key_with_tenant(digest)
    if found is None:
        raise AuthenticationError(INCORRECT_KEY)
    record, tenant = found
    if not hashes_match(record.key_hash, digest) or record.revoked_at is not None:
        raise AuthenticationError(INCORRECT_KEY)
    return record, tenant


def authenticate(store: TenantStore, key: str) -> tuple[ApiKeyRecord, Tenant]:
    return authenticate_hash(store, hash_api_key(key))


async def current_caller(request: Request) -> Caller:
    store: TenantStore = request.app.state.store
    key = bearer_token(request)
    if key is not None:
        record, tenant = await to_thread.run_sync(authenticate, store, key)
        return Caller(tenant, record)
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie is None:
        raise AuthenticationError(MISSING_KEY, code=None)
    signer: SessionSigner = request.app.state.sessions
    digest = signer.verify(cookie)
    if digest is None:
        raise AuthenticationError(
            "Your session has expired or is invalid; please sign in again.", code="invalid_session"
        )
    if request.method not in SAFE_METHODS and request.headers.get(CSRF_HEADER) != CSRF_VALUE:
        raise PermissionDeniedError(
            f"Requests that change something with a session cookie must send the {CSRF_HEADER}: {CSRF_VALUE} header.",
            code="csrf_check_failed",
        )
    record, tenant = await to_thread.run_sync(authenticate_hash, store, digest)
    return Caller(tenant, record, via_session=True)


CurrentCaller = Annotated[Caller, Depends(current_caller)]


async def current_tenant(caller: CurrentCaller) -> Tenant:
    return caller.tenant


CurrentTenant = Annotated[Tenant, Depends(current_tenant)]


def _check_admin(store: TenantStore, key: str) -> AdminKeyRecord:
    digest = hash_api_key(key)
    record = store.find_admin_key(digest)
    if record is None or record.revoked_at is not None or not hashes_match(record.key_hash, digest):
        raise AuthenticationError("Incorrect admin key provided.", code="invalid_admin_key")
    return record


async def current_admin(request: Request) -> AdminKeyRecord:
    key = bearer_token(request)
    if key is None:
        raise AuthenticationError("Admin endpoints need an admin key as a bearer token.", code=None)
    return await to_thread.run_sync(_check_admin, request.app.state.store, key)


CurrentAdmin = Annotated[AdminKeyRecord, Depends(current_admin)]

"""`/v1/session`: the web chat signs in with an API key and gets a signed HttpOnly cookie; it never keeps the key."""

from __future__ import annotations

from anyio import to_thread
from fastapi import APIRouter, Request, Response

from functions.accounts.auth import CurrentCaller, authenticate
from functions.accounts.sessions import CSRF_HEADER, CSRF_VALUE, SESSION_COOKIE, SESSION_TTL_S
from functions.api.deps import ServerToolsDep, SessionSignerDep, TenantStoreDep
from functions.api.openapi_description import error_responses
from shared.errors import PermissionDeniedError
from shared.fleet.tables import limits_for
from shared.service_api.account_api import ApiKeyObject, SessionLogin, SessionObject, TenantObject

router = APIRouter(prefix="/v1/session", tags=["session"])

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def _secure(request: Request) -> bool:
    """`Secure` everywhere except plain http on loopback (the local default), where browsers would drop it."""
    return request.url.scheme == "https" or (request.url.hostname or "") not in LOOPBACK_HOSTS


@router.post("", responses=error_responses(401, 403))
async def sign_in(
    login: SessionLogin,
    request: Request,
    response: Response,
    store: TenantStoreDep,
    signer: SessionSignerDep,
    tools: ServerToolsDep,
) -> SessionObject:
    if request.headers.get(CSRF_HEADER) != CSRF_VALUE:
        raise PermissionDeniedError(
            f"Sign-in must send the {CSRF_HEADER}: {CSRF_VALUE} header.", code="csrf_check_failed"
        )
    record, tenant = await to_thread.run_sync(authenticate, store, login.api_key)
    token, expires = signer.issue(record.key_hash)
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=SESSION_TTL_S,
        path="/",
        httponly=True,
        secure=_secure(request),
        samesite="lax",
    )
    limits = limits_for(tenant.tier, tenant.limits)
    return SessionObject(
        tenant=TenantObject.of(tenant, limits),
        key=ApiKeyObject.of(record),
        expires_at=expires,
        server_tools=tools.offered(tenant.tier),
    )


@router.get("")
async def who_am_i(caller: CurrentCaller, tools: ServerToolsDep) -> SessionObject:
    limits = limits_for(caller.tenant.tier, caller.tenant.limits)
    return SessionObject(
        tenant=TenantObject.of(caller.tenant, limits),
        key=ApiKeyObject.of(caller.key),
        expires_at=None,
        server_tools=tools.offered(caller.tenant.tier),
    )


@router.delete("", status_code=204)
async def sign_out(request: Request) -> Response:
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, secure=_secure(request), samesite="lax")
    return response

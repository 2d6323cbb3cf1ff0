"""`/admin/v1`: tenants, users, API keys, safety events and the brownout switch, guarded by an admin key (never a
tenant key)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from anyio import to_thread
from fastapi import APIRouter, Depends, Path, Query

from functions.accounts.auth import current_admin
from functions.accounts.operations import mint_api_key
from functions.api.deps import PoolControlDep, SafetyAuditDep, TenantStoreDep
from functions.api.openapi_description import error_responses
from functions.api.routers.usage import MAX_RANGE, TIME_HELP, parse_time
from functions.control.brownout import BrownoutController
from shared.errors import InvalidRequestError, NotFoundError
from shared.fleet.tables import limits_for
from shared.service_api.account_api import (
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyList,
    ApiKeyObject,
    Brownout,
    BrownoutState,
    SafetyEventList,
    SafetyEventObject,
    TenantCreate,
    TenantCreated,
    TenantList,
    TenantObject,
    UserCreate,
    UserList,
    UserObject,
    check_safety_tier,
)
from shared.storage.accounts import Tenant, TenantChanges
from shared.storage.timestamps import to_iso, utc_now

router = APIRouter(prefix="/admin/v1", tags=["admin"], dependencies=[Depends(current_admin)])

TenantId = Annotated[str, Path(pattern=r"^ten_[0-9a-f]{32}$")]
KeyId = Annotated[str, Path(pattern=r"^key_[0-9a-f]{32}$")]


Store = TenantStoreDep
SafetyAudit = SafetyAuditDep
SAFETY_EVENTS_DEFAULT_SPAN = timedelta(days=30)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # no event is older (and earlier bounds would not sort as stored times)


def _object(tenant: Tenant) -> TenantObject:
    return TenantObject.of(tenant, limits_for(tenant.tier, tenant.limits))


def _found(tenant: Tenant | None, tenant_id: str) -> Tenant:
    if tenant is None:
        raise NotFoundError(f"No tenant found with id '{tenant_id}'.", param="tenant_id")
    return tenant


@router.get("/tenants")
async def list_tenants(store: Store) -> TenantList:
    return TenantList(data=[_object(t) for t in await to_thread.run_sync(store.list_tenants)])


@router.post("/tenants", status_code=201)
async def create_tenant(spec: TenantCreate, store: Store) -> TenantCreated:
    check_safety_tier(spec.tier, spec.safety)
    tenant = await to_thread.run_sync(
        lambda: store.create_tenant(spec.name, spec.tier, safety=spec.safety, purpose=spec.purpose)
    )
    minted = None
    if spec.key_label is not None:
        minted = await to_thread.run_sync(lambda: mint_api_key(store, tenant.id, spec.key_label or "api key"))
    key = None if minted is None else ApiKeyCreated(**ApiKeyObject.of(minted.record).model_dump(), key=minted.key)
    return TenantCreated(tenant=_object(tenant), api_key=key)


@router.get("/tenants/{tenant_id}", responses=error_responses(404))
async def get_tenant(tenant_id: TenantId, store: Store) -> TenantObject:
    return _object(_found(await to_thread.run_sync(store.get_tenant, tenant_id), tenant_id))


@router.patch("/tenants/{tenant_id}", responses=error_responses(404))
async def update_tenant(tenant_id: TenantId, changes: TenantChanges, store: Store) -> TenantObject:
    if "instructions" in changes.model_fields_set:  # the account's own (PUT /v1/account/instructions)
        raise InvalidRequestError("An account's instructions are its own to set.", param="instructions")
    try:
        changes.changed()
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from exc
    if changes.safety is not None:  # checked against the tier the tenant will have, before anything is written
        current = _found(await to_thread.run_sync(store.get_tenant, tenant_id), tenant_id)
        check_safety_tier(changes.tier or current.tier, changes.safety)
    return _object(_found(await to_thread.run_sync(store.update_tenant, tenant_id, changes), tenant_id))


@router.get("/tenants/{tenant_id}/users", responses=error_responses(404))
async def list_users(tenant_id: TenantId, store: Store) -> UserList:
    _found(await to_thread.run_sync(store.get_tenant, tenant_id), tenant_id)
    return UserList(data=[UserObject.of(u) for u in await to_thread.run_sync(store.list_users, tenant_id)])


@router.post("/tenants/{tenant_id}/users", status_code=201, responses=error_responses(404))
async def create_user(tenant_id: TenantId, spec: UserCreate, store: Store) -> UserObject:
    _found(await to_thread.run_sync(store.get_tenant, tenant_id), tenant_id)
    try:
        user = await to_thread.run_sync(store.create_user, tenant_id, spec.email, spec.name)
    except ValueError as exc:
        raise InvalidRequestError(f"Tenant '{tenant_id}' already has a user {spec.email!r}.", param="email") from exc
    return UserObject.of(user)


@router.get("/tenants/{tenant_id}/keys", responses=error_responses(404))
async def list_keys(tenant_id: TenantId, store: Store) -> ApiKeyList:
    _found(await to_thread.run_sync(store.get_tenant, tenant_id), tenant_id)
    return ApiKeyList(data=[ApiKeyObject.of(k) for k in await to_thread.run_sync(store.list_keys, tenant_id)])


@router.post("/tenants/{tenant_id}/keys", status_code=201, responses=error_responses(404))
async def create_key(tenant_id: TenantId, spec: ApiKeyCreate, store: Store) -> ApiKeyCreated:
    minted = await to_thread.run_sync(lambda: mint_api_key(store, tenant_id, spec.label, user_id=spec.user_id))
    return ApiKeyCreated(**ApiKeyObject.of(minted.record).model_dump(), key=minted.key)


@router.delete("/tenants/{tenant_id}/keys/{key_id}", responses=error_responses(404))
async def revoke_key(tenant_id: TenantId, key_id: KeyId, store: Store) -> ApiKeyObject:
    record = await to_thread.run_sync(lambda: store.revoke_key(key_id, tenant_id=tenant_id))
    if record is None:
        raise NotFoundError(f"Tenant '{tenant_id}' has no API key '{key_id}'.", param="key_id")
    return ApiKeyObject.of(record)


@router.get("/tenants/{tenant_id}/safety-events", responses=error_responses(404))
async def list_safety_events(
    tenant_id: TenantId,
    store: Store,
    audit: SafetyAudit,
    start: Annotated[str | None, Query(description=TIME_HELP + " Default: 30 days before `end`.")] = None,
    end: Annotated[str | None, Query(description=TIME_HELP + " Exclusive. Default: now.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> SafetyEventList:
    """The tenant's blocked requests and halted streams in [start, end), newest first."""
    finish = parse_time(end, "end") if end else utc_now() + timedelta(seconds=1)
    default_start = max(finish, EPOCH + SAFETY_EVENTS_DEFAULT_SPAN) - SAFETY_EVENTS_DEFAULT_SPAN
    begin = max(parse_time(start, "start") if start else default_start, EPOCH)
    if finish <= begin:
        raise InvalidRequestError("'end' must be later than 'start'.", param="end")
    if finish - begin > MAX_RANGE:
        raise InvalidRequestError(f"The range may span at most {MAX_RANGE.days} days.", param="start")
    _found(await to_thread.run_sync(store.get_tenant, tenant_id), tenant_id)
    records = await to_thread.run_sync(lambda: audit.list_for_tenant(tenant_id, begin, finish, limit=limit + 1))
    shown, has_more = records[:limit], len(records) > limit
    return SafetyEventList(
        data=[SafetyEventObject.of(record) for record in shown],
        has_more=has_more,
        next_end=to_iso(shown[-1].at) if has_more else None,
    )


def _brownout_state(control: BrownoutController) -> BrownoutState:
    return BrownoutState(mode=control.mode, active=control.any_active(), pools=control.pools())


@router.get("/brownout")
async def get_brownout(control: PoolControlDep) -> BrownoutState:
    return _brownout_state(control.brownout)


@router.put("/brownout")
async def set_brownout(change: Brownout, pools: PoolControlDep) -> BrownoutState:
    """Override brownout on every gateway replica (on or off in every pool; the others follow within a sync round), or
    give it back to the load control loop (auto). While a pool is in brownout each tier's completion budget there is
    capped (docs/reliability-control.md)."""
    control = pools.brownout
    await control.set_fleet_mode(change.chosen_mode())
    return _brownout_state(control)

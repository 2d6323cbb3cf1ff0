"""`/v1/account/data`: erase (GDPR) or export everything the service keeps for the calling tenant."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from functions.accounts.auth import CurrentTenant
from functions.api.deps import AccountDataDep
from shared.service_api.conversation_api import AccountDataDeleted

router = APIRouter(prefix="/v1/account", tags=["account"])


@router.delete("/data")
async def erase_account_data(tenant: CurrentTenant, account: AccountDataDep) -> AccountDataDeleted:
    return await run_in_threadpool(account.erase, tenant.id)


@router.get("/export")
async def export_account_data(tenant: CurrentTenant, account: AccountDataDep) -> StreamingResponse:
    filename = f"fleetchat-export-{tenant.id}.json"
    return StreamingResponse(
        account.export(tenant.id),
        media_type="application/json",
        headers={"content-disposition": f'attachment; filename="{filename}"'},
    )

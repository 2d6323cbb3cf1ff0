"""`/v1/account`: erase (GDPR) or export everything the service keeps for the calling tenant; its custom
instructions."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from functions.accounts.auth import CurrentCaller, CurrentTenant
from functions.api.deps import AccountDataDep, InstructionsDep
from functions.api.openapi_description import error_responses
from shared.service_api.conversation_api import AccountDataDeleted, InstructionsObject, InstructionsUpdate

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


@router.get("/instructions")
async def get_instructions(tenant: CurrentTenant) -> InstructionsObject:
    return InstructionsObject(instructions=tenant.instructions)


@router.put("/instructions", responses=error_responses(400))
async def set_instructions(
    update: InstructionsUpdate, caller: CurrentCaller, instructions: InstructionsDep
) -> InstructionsObject:
    return await instructions.set_for_account(caller, update.instructions)

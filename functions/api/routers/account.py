"""`/v1/account`: erase (GDPR) or export everything the service keeps for the calling tenant; its custom
instructions and its memory."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from functions.accounts.auth import CurrentCaller, CurrentTenant
from functions.api.deps import AccountDataDep, InstructionsDep, MemoryDep
from functions.api.openapi_description import error_responses
from shared.service_api.conversation_api import AccountDataDeleted, InstructionsObject, InstructionsUpdate
from shared.service_api.memory_api import (
    MemoryItemDeleted,
    MemoryItemObject,
    MemoryObject,
    MemorySettings,
    MemoryText,
)

router = APIRouter(prefix="/v1/account", tags=["account"])
MemoryItemId = Annotated[str, Path(pattern=r"^mem_[0-9a-f]{32}$")]


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


@router.get("/memory")
async def get_memory(caller: CurrentCaller, memory: MemoryDep) -> MemoryObject:
    """The facts this account asked to be remembered, and whether they are used (docs/conversations.md, "Memory")."""
    return await memory.get(caller)


@router.put("/memory", responses=error_responses(400))
async def set_memory(settings: MemorySettings, caller: CurrentCaller, memory: MemoryDep) -> MemoryObject:
    """Turn memory on or off (off: the items are kept, and no prompt renders them)."""
    return await memory.set_enabled(caller, settings.enabled)


@router.post("/memory/items", responses=error_responses(400))
async def add_memory_item(body: MemoryText, caller: CurrentCaller, memory: MemoryDep) -> MemoryItemObject:
    """Remember a fact (judged by the safety pre-filter first; at most 50 items: `memory_full`)."""
    return await memory.add(caller, body.text)


@router.patch("/memory/items/{item_id}", responses=error_responses(400, 404))
async def edit_memory_item(
    item_id: MemoryItemId, body: MemoryText, caller: CurrentCaller, memory: MemoryDep
) -> MemoryItemObject:
    return await memory.edit(caller, item_id, body.text)


@router.delete("/memory/items/{item_id}", responses=error_responses(404))
async def delete_memory_item(item_id: MemoryItemId, caller: CurrentCaller, memory: MemoryDep) -> MemoryItemDeleted:
    await memory.delete(caller, item_id)
    return MemoryItemDeleted(id=item_id)

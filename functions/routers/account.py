"""`/v1/account/data`: erase (GDPR) or export everything the service keeps for the calling tenant."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from functions.auth import CurrentTenant
from functions.conversation_export import account_export_json
from functions.routers.conversations import Store
from shared.conversation_api import AccountDataDeleted
from shared.feedback_api import FeedbackObject
from shared.storage.conversations import AuditRecord
from shared.storage.timestamps import utc_now

router = APIRouter(prefix="/v1/account", tags=["account"])


@router.delete("/data")
async def erase_account_data(tenant: CurrentTenant, store: Store, request: Request) -> AccountDataDeleted:
    # Feedback first: a retry after a failure part-way finds the conversations still there and erases them then.
    feedback = await run_in_threadpool(request.app.state.feedback.erase_tenant, tenant.id)
    audit = AuditRecord(
        at=utc_now(), actor=f"tenant:{tenant.id}", action="erase", tenant_id=tenant.id, detail="account data erase"
    )
    erased = await run_in_threadpool(store.erase_tenant, tenant.id, audit)
    return AccountDataDeleted(deleted_conversations=erased, deleted_feedback=feedback)


@router.get("/export")
async def export_account_data(tenant: CurrentTenant, store: Store, request: Request) -> StreamingResponse:
    conversations = store.export_tenant(tenant.id)
    # Every rating the service keeps for the tenant (those of replaced answers too), as the API shows them.
    feedback = (FeedbackObject.of(record) for record in request.app.state.feedback.list_tenant(tenant.id))
    filename = f"fleetchat-export-{tenant.id}.json"
    return StreamingResponse(
        account_export_json(tenant.id, conversations, feedback),
        media_type="application/json",
        headers={"content-disposition": f'attachment; filename="{filename}"'},
    )

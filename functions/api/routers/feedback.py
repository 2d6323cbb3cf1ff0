"""`/v1/conversations/{id}/messages/{index}/feedback`: rate an assistant message, read, list and remove ratings."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from functions.accounts.auth import CurrentCaller, CurrentTenant
from functions.api.deps import FeedbackServiceDep
from functions.api.openapi_description import error_responses
from functions.api.routers.conversations import ConversationId
from shared.errors import InvalidRequestError
from shared.service_api.feedback_api import FeedbackCreate, FeedbackDeleted, FeedbackList, FeedbackObject
from shared.storage.feedback import MAX_MESSAGE_INDEX

router = APIRouter(prefix="/v1/conversations", tags=["feedback"], responses=error_responses(404))


Service = FeedbackServiceDep


def valid_index(message_index: str) -> int:
    """A message index as `GET /v1/conversations/{id}` lists the messages (0-based), or a 400 naming it."""
    # The length first: int() refuses strings of more than 4,300 digits (a 500 otherwise).
    digits = len(str(MAX_MESSAGE_INDEX))
    if not (len(message_index) <= digits and message_index.isascii() and message_index.isdigit()) or (
        int(message_index) > MAX_MESSAGE_INDEX
    ):
        raise InvalidRequestError(
            f"'{message_index[:20]}' is not a message index (a whole number from 0 to {MAX_MESSAGE_INDEX}).",
            param="message_index",
            code="invalid_value",
        )
    return int(message_index)


MessageIndex = Annotated[int, Depends(valid_index)]


@router.post("/{conversation_id}/messages/{message_index}/feedback")
async def give_feedback(
    caller: CurrentCaller, service: Service, conversation_id: ConversationId, index: MessageIndex, body: FeedbackCreate
) -> FeedbackObject:
    record = await run_in_threadpool(service.give, caller, conversation_id, index, body)
    return FeedbackObject.of(record)


@router.get("/{conversation_id}/messages/{message_index}/feedback")
async def get_feedback(
    tenant: CurrentTenant, service: Service, conversation_id: ConversationId, index: MessageIndex
) -> FeedbackObject:
    record = await run_in_threadpool(service.one, tenant.id, conversation_id, index)
    return FeedbackObject.of(record)


@router.delete("/{conversation_id}/messages/{message_index}/feedback")
async def remove_feedback(
    tenant: CurrentTenant, service: Service, conversation_id: ConversationId, index: MessageIndex
) -> FeedbackDeleted:
    await run_in_threadpool(service.remove, tenant.id, conversation_id, index)
    return FeedbackDeleted(conversation_id=conversation_id, message_index=index)


@router.get("/{conversation_id}/feedback")
async def list_feedback(tenant: CurrentTenant, service: Service, conversation_id: ConversationId) -> FeedbackList:
    records = await run_in_threadpool(service.current, tenant.id, conversation_id)
    return FeedbackList(data=[FeedbackObject.of(r) for r in records])

"""`GET /v1/chat/completions/{id}/stream` (resume a dropped stream after `Last-Event-ID`) and
`POST /v1/chat/completions/{id}/cancel` (stop generating: the Stop button), for the caller's own responses only.
`{id}` is the completion id (`chatcmpl-...`, in every chunk) or the request id (the `x-request-id` header)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, Path
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from functions.accounts.auth import CurrentCaller
from functions.api.deps import ResumableStreamsDep
from functions.api.openapi_description import error_responses
from functions.chat.streams.resumable import parse_last_event_id

router = APIRouter(prefix="/v1", tags=["chat"])

CompletionId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]


class StreamCancel(BaseModel):
    id: str
    object: Literal["chat.completion.stream"] = "chat.completion.stream"
    # cancelled: this call stopped it (its partial answer is kept as "stopped"); ended: it had already finished.
    status: Literal["cancelled", "ended"]


@router.get(
    "/chat/completions/{completion_id}/stream",
    response_model=None,
    responses={
        200: {"description": "The stream's events after `Last-Event-ID`.", "content": {"text/event-stream": {}}},
        **error_responses(404, 410),
    },
)
async def resume_stream(
    completion_id: CompletionId,
    caller: CurrentCaller,
    streams: ResumableStreamsDep,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=32)] = None,
) -> StreamingResponse:
    """The events after `Last-Event-ID` (all of them without it), then the live stream until `[DONE]`. 404 when the
    response is unknown, expired or another tenant's; 410 when the events after `Last-Event-ID` were dropped."""
    after = parse_last_event_id(last_event_id)
    events, headers = await streams.resume_anywhere(caller.tenant.id, completion_id, after)
    return StreamingResponse(events, media_type="text/event-stream", headers={"cache-control": "no-cache", **headers})


@router.post("/chat/completions/{completion_id}/cancel", responses=error_responses(404))
async def cancel_stream(
    completion_id: CompletionId, caller: CurrentCaller, streams: ResumableStreamsDep
) -> StreamCancel:
    """Stop generating now (a dropped connection alone does not: it may come back), on whichever gateway replica
    generates it. Idempotent."""
    stopped = await streams.cancel_anywhere(caller.tenant.id, completion_id)
    return StreamCancel(id=completion_id, status="cancelled" if stopped else "ended")

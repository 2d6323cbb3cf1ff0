"""`POST /v1/chat/completions`: validate, route, and answer as JSON or as an SSE stream."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from functions.auth import CurrentTenant
from functions.chat_service import ChatService
from shared.schemas import ChatCompletionRequest

router = APIRouter(prefix="/v1", tags=["chat"])


@router.post("/chat/completions", response_model=None)
async def chat_completions(
    body: ChatCompletionRequest,
    tenant: CurrentTenant,
    request: Request,
    x_session_id: Annotated[str | None, Header(max_length=256)] = None,
) -> Response:
    service: ChatService = request.app.state.chat
    routed = service.route(tenant, body, x_session_id)
    if body.stream:
        wants_usage = bool(body.stream_options and body.stream_options.include_usage)
        upstream = await service.open_stream(routed, wants_usage)
        return StreamingResponse(
            upstream.events(), media_type="text/event-stream", headers={"cache-control": "no-cache"}
        )
    return JSONResponse(await service.complete(routed))

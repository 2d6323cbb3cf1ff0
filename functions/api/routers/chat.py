"""`POST /v1/chat/completions`: validate the body, run the chat pipeline (functions/chat/pipeline.py), answer as JSON or
as an SSE stream by the result's type."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from functions.accounts.auth import CurrentCaller
from functions.api.deps import ChatPipelineDep
from functions.api.openapi_description import error_responses
from functions.chat.delivery import StreamAnswer
from functions.chat.pipeline import ChatCall
from functions.chat.streams.resumable import RESUMABLE_HEADER, asks_resumable
from functions.judging.client import JUDGE_CALL_HEADER
from shared.wire.openai_shape import with_required_nulls
from shared.wire.schemas import ChatCompletionRequest

router = APIRouter(prefix="/v1", tags=["chat"])

_STREAM_OR_JSON: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The chat completion, or with `stream: true` its server-sent events (`data: {chunk}` lines "
        "ending with `data: [DONE]`).",
        "content": {"application/json": {}, "text/event-stream": {}},
    }
}


@router.post(
    "/chat/completions",
    response_model=None,
    responses={**_STREAM_OR_JSON, **error_responses(404, 429, 502, 503)},
)
async def chat_completions(
    body: ChatCompletionRequest,
    caller: CurrentCaller,
    pipeline: ChatPipelineDep,
    request: Request,
    x_session_id: Annotated[str | None, Header(max_length=256)] = None,
    x_conversation_id: Annotated[str | None, Header(max_length=64)] = None,
) -> Response:
    call = ChatCall(
        caller=caller,
        body=body,
        receive=request.receive,
        session_header=x_session_id,
        conversation_id=x_conversation_id,
        cache_control=request.headers.get("cache-control"),
        resumable=asks_resumable(request.headers.get(RESUMABLE_HEADER)),
        judge_call=JUDGE_CALL_HEADER in request.headers,
        accept_language=request.headers.get("accept-language"),
    )
    result = await pipeline.run(call)
    if isinstance(result, StreamAnswer):
        headers = {"cache-control": "no-cache", **result.headers}
        return StreamingResponse(result.events, media_type="text/event-stream", headers=headers)
    return JSONResponse(with_required_nulls(result.body), headers=result.headers)

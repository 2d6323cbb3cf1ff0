"""`POST /v1/completions`: validate the body, run the completions path (functions/completions/service.py), answer as
JSON or as an SSE stream."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from functions.accounts.auth import CurrentCaller
from functions.api.deps import CompletionsServiceDep
from functions.api.openapi_description import error_responses
from shared.wire.completions_api import CompletionRequest

router = APIRouter(prefix="/v1", tags=["completions"])

_STREAM_OR_JSON: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The completion, or with `stream: true` its server-sent events (`data: {chunk}` lines ending "
        "with `data: [DONE]`).",
        "content": {"application/json": {}, "text/event-stream": {}},
    }
}


@router.post("/completions", response_model=None, responses={**_STREAM_OR_JSON, **error_responses(404, 429, 502, 503)})
async def completions(
    body: CompletionRequest, caller: CurrentCaller, service: CompletionsServiceDep, request: Request
) -> Response:
    answer = await service.answer(caller, body, request.receive)
    if answer.events is not None:
        headers = {"cache-control": "no-cache", **answer.headers}
        return StreamingResponse(answer.events, media_type="text/event-stream", headers=headers)
    return JSONResponse(answer.body, headers=answer.headers)

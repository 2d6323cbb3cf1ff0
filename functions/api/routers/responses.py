"""`/v1/responses` (OpenAI's Responses API): create (JSON or typed events), retrieve (or resume its stream with
`stream=true&starting_after=N`), delete, and list a response's input items (functions/responses/service.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from functions.accounts.auth import CurrentCaller
from functions.api.deps import ResponsesServiceDep, ResumableStreamsDep
from functions.api.openapi_description import error_responses
from functions.chat.delivery import StreamAnswer
from functions.chat.streams.resumable import RESUMABLE_HEADER, asks_resumable
from functions.responses.events import response_events
from functions.responses.service import ResponseCall
from shared.wire.responses_api import ResponsesRequest
from shared.wire.sse import DONE

router = APIRouter(prefix="/v1", tags=["responses"])

ResponseId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]

_STREAM_OR_JSON: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The Response, or with `stream: true` its typed server-sent events (`event: response.created` "
        "... `event: response.completed`), each with its `sequence_number`.",
        "content": {"application/json": {}, "text/event-stream": {}},
    }
}


async def _without_done(events: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
    """The Responses API's stream ends with its terminal event: the buffer's `[DONE]` marker is not sent."""
    async with contextlib.aclosing(events):
        async for event in events:
            if not event.endswith(DONE):
                yield event


def _event_stream(events: AsyncGenerator[bytes, None], headers: dict[str, str]) -> StreamingResponse:
    return StreamingResponse(
        _without_done(events), media_type="text/event-stream", headers={"cache-control": "no-cache", **headers}
    )


@router.post("/responses", response_model=None, responses={**_STREAM_OR_JSON, **error_responses(404, 429, 502, 503)})
async def create_response(
    body: ResponsesRequest,
    caller: CurrentCaller,
    responses: ResponsesServiceDep,
    request: Request,
    x_session_id: Annotated[str | None, Header(max_length=256)] = None,
) -> Response:
    call = ResponseCall(
        caller=caller,
        request=body,
        receive=request.receive,
        session_header=x_session_id,
        cache_control=request.headers.get("cache-control"),
        resumable=asks_resumable(request.headers.get(RESUMABLE_HEADER)),
    )
    result = await responses.create(call)
    if isinstance(result, StreamAnswer):
        return _event_stream(result.events, result.headers)
    return JSONResponse(result.body, headers=result.headers)


@router.get("/responses/{response_id}", response_model=None, responses=error_responses(404, 410))
async def retrieve_response(
    response_id: ResponseId,
    caller: CurrentCaller,
    responses: ResponsesServiceDep,
    streams: ResumableStreamsDep,
    stream: bool = False,
    starting_after: Annotated[int | None, Query(ge=0)] = None,
    include: Annotated[list[str] | None, Query()] = None,
    include_obfuscation: bool | None = None,
) -> Response:
    """The stored Response; with `stream=true`, its events after `starting_after` (all of them without it), then the
    live stream, while the gateway still holds them (410 when the events asked for were dropped)."""
    if stream:
        # The events are made again from the buffer's start (the same events, sequence numbers included), and those
        # the client had are left out.
        events, headers = await streams.resume_anywhere(caller.tenant.id, response_id, 0)
        after = -1 if starting_after is None else starting_after
        return _event_stream(response_events(events, after), headers)
    return JSONResponse(await responses.retrieve(caller.tenant, response_id))


@router.delete("/responses/{response_id}", responses=error_responses(404))
async def delete_response(response_id: ResponseId, caller: CurrentCaller, responses: ResponsesServiceDep) -> Any:
    """Forget a stored response (its conversation keeps the turn: delete the conversation to remove that)."""
    return await responses.delete(caller.tenant, response_id)


@router.get("/responses/{response_id}/input_items", responses=error_responses(404))
async def list_input_items(
    response_id: ResponseId,
    caller: CurrentCaller,
    responses: ResponsesServiceDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
    after: Annotated[str | None, Query(max_length=128)] = None,
    include: Annotated[list[str] | None, Query()] = None,
) -> Any:
    """The items this response's request added (newest first by default), paged with `after` and `limit`."""
    return await responses.input_items(caller.tenant, response_id, limit=limit, order=order, after=after)

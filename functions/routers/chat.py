"""`POST /v1/chat/completions`: validate, attach the conversation, route, and answer as JSON or as an SSE stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from functions.auth import CurrentTenant
from functions.chat_service import ChatService
from functions.conversation_turns import STORED_HEADER, ConversationTurns, Turn
from functions.gateway_metrics import GatewayMetrics
from functions.stream_capture import StreamCapture, answer_text
from shared.schemas import ChatCompletionRequest
from shared.sse import DONE

router = APIRouter(prefix="/v1", tags=["chat"])


@router.post("/chat/completions", response_model=None)
async def chat_completions(
    body: ChatCompletionRequest,
    tenant: CurrentTenant,
    request: Request,
    x_session_id: Annotated[str | None, Header(max_length=256)] = None,
    x_conversation_id: Annotated[str | None, Header(max_length=64)] = None,
) -> Response:
    service: ChatService = request.app.state.chat
    turns: ConversationTurns = request.app.state.turns
    turn = await turns.begin(tenant, body, x_conversation_id)
    if turn is not None:
        body = turn.apply(body)
    # A conversation sticks to one replica (its KV blocks live there) unless the client names a session itself.
    routed = service.route(tenant, body, x_session_id or (turn.conversation_id if turn else None))
    extra_headers = turn.headers() if turn else {}
    if body.stream:
        wants_usage = bool(body.stream_options and body.stream_options.include_usage)
        upstream = await service.open_stream(routed, wants_usage)
        events = upstream.events() if turn is None else _persisting(upstream.events(), turns, turn, service.metrics)
        return StreamingResponse(
            events, media_type="text/event-stream", headers={"cache-control": "no-cache", **extra_headers}
        )
    completion = await service.complete(routed)
    if turn is not None:
        text, finish_reason = answer_text(completion)
        stored, version = await turns.finish(turn, text) if finish_reason else (False, None)
        _count(service.metrics, turn, stored)
        completion["conversation"] = turn.summary(stored, version)
        extra_headers[STORED_HEADER] = str(stored).lower()
    return JSONResponse(completion, headers=extra_headers)


def _count(metrics: GatewayMetrics, turn: Turn, stored: bool) -> None:
    metrics.conversation_turns.labels(turn.history.value, str(stored).lower()).inc()


async def _persisting(
    events: AsyncIterator[bytes], turns: ConversationTurns, turn: Turn, metrics: GatewayMetrics
) -> AsyncIterator[bytes]:
    """Relay the stream; once the answer is complete, save the turn, then say whether it was saved, then [DONE]."""
    capture = StreamCapture()
    async for event in events:
        if event == DONE:
            stored, version = await turns.finish(turn, capture.text) if capture.completed else (False, None)
            _count(metrics, turn, stored)
            yield capture.closing_chunk(turn.summary(stored, version))
            yield DONE
            return
        capture.observe(event)
        yield event

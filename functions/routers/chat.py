"""`POST /v1/chat/completions`: attach the conversation, admit, route, answer as JSON or an SSE stream, and account."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from functions.admission import BROWNOUT_HEADER
from functions.auth import CurrentCaller
from functions.chat_service import ChatService
from functions.conversation_turns import STORED_HEADER, ConversationTurns, Turn
from functions.gateway_metrics import GatewayMetrics
from functions.request_accounting import Accounting, RequestAccount, TokenUsage
from functions.stream_capture import StreamCapture, answer_text
from shared.errors import FleetchatError
from shared.schemas import ChatCompletionRequest
from shared.sse import DONE
from shared.storage.ledger import Outcome

router = APIRouter(prefix="/v1", tags=["chat"])


@router.post("/chat/completions", response_model=None)
async def chat_completions(
    body: ChatCompletionRequest,
    caller: CurrentCaller,
    request: Request,
    x_session_id: Annotated[str | None, Header(max_length=256)] = None,
    x_conversation_id: Annotated[str | None, Header(max_length=64)] = None,
) -> Response:
    service: ChatService = request.app.state.chat
    turns: ConversationTurns = request.app.state.turns
    accounting: Accounting = request.app.state.accounting
    turn = await turns.begin(caller.tenant, body, x_conversation_id)
    if turn is not None:
        body = turn.apply(body)
    pool = service.pool_for(caller.tenant, body)
    account = await accounting.open(caller, body, pool)
    body = account.apply(body)
    # A conversation sticks to one replica (its KV blocks live there) unless the client names a session itself.
    routed = service.route(pool, body, x_session_id or (turn.conversation_id if turn else None))
    headers = {**(turn.headers() if turn else {}), **account.headers}
    if account.reservation.brownout:
        headers[BROWNOUT_HEADER] = "true"
    try:
        if body.stream:
            upstream = await service.open_stream(routed)
        else:
            completion = await service.complete(routed)
    except FleetchatError as exc:
        await account.close(None, Outcome.FAILED)
        exc.headers.update(account.headers)
        raise
    except BaseException:
        await account.close(None, Outcome.ABORTED)
        raise
    if body.stream:
        capture = StreamCapture(client_wants_usage=bool(body.stream_options and body.stream_options.include_usage))
        events = _relay(upstream.events(), capture, account, turns, turn, service.metrics)
        return StreamingResponse(
            events, media_type="text/event-stream", headers={"cache-control": "no-cache", **headers}
        )
    text, finish_reason = answer_text(completion)
    await account.close(TokenUsage.from_openai(completion.get("usage")), Outcome.COMPLETED)
    if turn is not None:
        stored, version = await turns.finish(turn, text) if finish_reason else (False, None)
        _count(service.metrics, turn, stored)
        completion["conversation"] = turn.summary(stored, version)
        headers[STORED_HEADER] = str(stored).lower()
    return JSONResponse(completion, headers=headers)


def _count(metrics: GatewayMetrics, turn: Turn, stored: bool) -> None:
    metrics.conversation_turns.labels(turn.history.value, str(stored).lower()).inc()


def _usage_of(capture: StreamCapture, account: RequestAccount) -> TokenUsage | None:
    """The stream's usage: the worker's last report; failing that (a worker without per-chunk usage that stopped
    early), the prompt estimate and one token per content chunk relayed."""
    reported = TokenUsage.from_openai(capture.usage)
    if reported is not None:
        return reported
    return TokenUsage(account.prompt_estimate, capture.content_chunks) if capture.content_chunks else None


async def _relay(
    events: AsyncIterator[bytes],
    capture: StreamCapture,
    account: RequestAccount,
    turns: ConversationTurns,
    turn: Turn | None,
    metrics: GatewayMetrics,
) -> AsyncIterator[bytes]:
    """Relay the stream. At its end: account for it, save the conversation turn and say whether it was saved, then
    [DONE]. A client that goes away mid-stream is still accounted for (aborted, billed for what was generated)."""
    try:
        async for event in events:
            if event == DONE:
                outcome = Outcome.COMPLETED if capture.completed else Outcome.ABORTED
                await account.close(_usage_of(capture, account), outcome)
                if turn is not None:
                    stored, version = await turns.finish(turn, capture.text) if capture.completed else (False, None)
                    _count(metrics, turn, stored)
                    yield capture.closing_chunk(turn.summary(stored, version))
                yield DONE
                return
            relayed = capture.relay(event)
            if relayed is not None:
                yield relayed
    finally:
        await account.close(_usage_of(capture, account), Outcome.ABORTED)

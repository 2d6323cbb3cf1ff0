"""Server-sent-event framing shared by the worker and the gateway: one place that writes `data:` lines."""

from __future__ import annotations

from pydantic import BaseModel

from shared.errors import FleetchatError

DONE = b"data: [DONE]\n\n"


def sse_data(model: BaseModel) -> bytes:
    """One SSE event carrying a JSON body (unset fields left out, as OpenAI does)."""
    return b"data: " + model.model_dump_json(exclude_none=True).encode() + b"\n\n"


def sse_error(error: FleetchatError) -> bytes:
    """An in-band error event: the `openai` SDK raises `APIError` when a streamed event carries `error`."""
    return b"event: error\ndata: " + error.to_response_model().model_dump_json().encode() + b"\n\n"


def with_event_id(seq: int, event: bytes) -> bytes:
    """The event with an `id:` line in front (SSE fields may come in any order): what `Last-Event-ID` names."""
    return b"id: %d\n" % seq + event

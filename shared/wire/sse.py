"""Server-sent-event framing shared by the worker and the gateway: one place that writes `data:` lines."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from shared.errors import FleetchatError
from shared.wire.openai_shape import with_required_nulls

DONE = b"data: [DONE]\n\n"


def sse_data(model: BaseModel) -> bytes:
    """One SSE event carrying a JSON body: unset fields left out, as OpenAI does, but the ones OpenAI requires null
    kept (shared/wire/openai_shape.py)."""
    return sse_json(with_required_nulls(model.model_dump(mode="json", exclude_none=True)))


def sse_json(body: dict[str, Any]) -> bytes:
    """One SSE event carrying `body` as compact JSON (what the gateway writes for a chunk it reshaped or made)."""
    return b"data: " + json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def sse_error(error: FleetchatError) -> bytes:
    """An in-band error event: the `openai` SDK raises `APIError` when a streamed event carries `error`."""
    return b"event: error\ndata: " + error.to_response_model().model_dump_json().encode() + b"\n\n"


def with_event_id(seq: int, event: bytes) -> bytes:
    """The event with an `id:` line in front (SSE fields may come in any order): what `Last-Event-ID` names."""
    return b"id: %d\n" % seq + event

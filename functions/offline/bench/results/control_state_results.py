"""The shared control state's benchmark record: what streamed answers cost on each engine."""

from __future__ import annotations

from pydantic import BaseModel


class ControlStateStats(BaseModel):
    engine: str
    answers: int
    tokens_per_answer: int
    token_interval_ms: float
    first_event_p50_ms: float | None  # open + spec + first event written: added to time to first token
    first_event_p99_ms: float | None
    event_p50_ms: float | None  # each later event, from generated to visible
    event_p99_ms: float | None
    requests_per_answer: float
    requests_per_1k_tokens: float

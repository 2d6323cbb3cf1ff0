"""The storage contract for admission counters shared by every gateway replica: fixed-window RPM/TPM counters and
the rolling message log behind the free tier's message cap."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Protocol

from pydantic import BaseModel, Field

# Counter windows are kept this long after they close (settlements of long streams still find theirs), then dropped.
COUNTER_RETENTION_S = 3600


class WindowCharge(BaseModel):
    """Add `requests` and `tokens` to one counter window, provided the totals stay within the maxima."""

    scope: str = Field(min_length=1, max_length=200)  # e.g. "key:key_…" or "tenant:ten_…"
    window_start: int  # unix seconds, a multiple of window_s
    window_s: int = Field(ge=1)
    requests: int = Field(ge=0)
    tokens: int = Field(ge=0)
    max_requests: int = Field(ge=0)
    max_tokens: int = Field(ge=0)


class WindowCount(BaseModel):
    scope: str
    window_start: int
    requests: int
    tokens: int


class ChargeOutcome(BaseModel):
    """All charges applied, or none. `counts` has one entry per charge, in order: the windows' totals after the
    charge (admitted) or as found (refused)."""

    admitted: bool
    counts: list[WindowCount]
    refused_scope: str | None = None
    refused_by: Literal["requests", "tokens"] | None = None


class MessageCapOutcome(BaseModel):
    admitted: bool
    used: int  # messages in the rolling window, this one included when admitted
    oldest_at: datetime | None  # the oldest message still in the window (when the next slot frees)


class RateLimitStore(Protocol):
    """Atomic across processes and replicas: two gateways on one store enforce one limit."""

    def charge(self, charges: list[WindowCharge]) -> ChargeOutcome:
        """Apply every charge or none (a refusal changes nothing).

        A charge is refused when its window's requests + charge.requests > max_requests, or tokens + charge.tokens >
        max_tokens. The first refused charge (in list order) is named in the outcome.
        """
        ...

    def settle(self, scope: str, window_start: int, token_delta: int) -> None:
        """Correct a window's token count by `token_delta` (actual - reserved; may be negative; never below 0)."""
        ...

    def record_message(self, subject: str, at: datetime, window_s: int, cap: int) -> MessageCapOutcome:
        """Log one message at `at` unless `cap` messages are already logged in (at - window_s, at]."""
        ...

    def forget_message(self, subject: str, at: datetime) -> None:
        """Remove one message logged at `at` (a request that failed before the model answered is not counted)."""
        ...

    def close(self) -> None: ...

"""The billed meters, the window arithmetic and the deterministic meter-event identifier."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from shared.settings import Settings
from shared.storage.ledger import TenantTotals

# Stripe accepts meter event timestamps up to 35 days in the past; a margin keeps an event from ageing out in flight.
STRIPE_MAX_PAST = timedelta(days=35)
STRIPE_PAST_MARGIN = timedelta(hours=1)
IDENTIFIER_MAX_LEN = 100
IDENTIFIER_PREFIX = "fc"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Meter(BaseModel):
    """One billed quantity: `key` names it in the ledger, `short` in identifiers, `event_name` at Stripe."""

    model_config = ConfigDict(frozen=True)

    key: str
    short: str
    event_name: str

    def value(self, totals: TenantTotals) -> int:
        batch, key = self.key.startswith("batch_"), self.key.removeprefix("batch_")
        prefix = "batch_" if batch else ""
        prompt, cached = getattr(totals, f"{prefix}prompt_tokens"), getattr(totals, f"{prefix}cached_tokens")
        if key == "input":
            # Cached prompt tokens are billed on their own meter, never twice.
            return max(prompt - cached, 0)
        if key == "cached_input":
            return int(cached)
        if key == "output":
            return int(getattr(totals, f"{prefix}completion_tokens"))
        if key == "embedding_input":
            return int(getattr(totals, f"{prefix}embedding_tokens"))
        if key == "rerank_input":
            return int(getattr(totals, f"{prefix}rerank_tokens"))
        raise ValueError(f"unknown meter {self.key!r}")


def meters_from_settings(settings: Settings) -> tuple[Meter, ...]:
    return (
        Meter(key="input", short="in", event_name=settings.meter.event_input),
        Meter(key="cached_input", short="cin", event_name=settings.meter.event_cached_input),
        Meter(key="output", short="out", event_name=settings.meter.event_output),
        # Issue 22: embedding input tokens, a meter of their own (priced apart from chat in Stripe).
        Meter(key="embedding_input", short="emb", event_name=settings.meter.event_embedding_input),
        # Issue 49: /v1/rerank's (query, document) pair tokens, priced apart again.
        Meter(key="rerank_input", short="rr", event_name=settings.meter.event_rerank_input),
        # Issue 48: lines of batches, at the batch price (their own Stripe prices).
        Meter(key="batch_input", short="bin", event_name=settings.meter.event_batch_input),
        Meter(key="batch_cached_input", short="bcin", event_name=settings.meter.event_batch_cached_input),
        Meter(key="batch_output", short="bout", event_name=settings.meter.event_batch_output),
        Meter(key="batch_embedding_input", short="bemb", event_name=settings.meter.event_batch_embedding_input),
    )


class Window(NamedTuple):
    """A half-open metering window [start, end), aligned to the window length since the Unix epoch."""

    start: datetime
    end: datetime


def align_down(moment: datetime, window_s: int) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    offset = (moment - _EPOCH) // timedelta(seconds=window_s)
    return _EPOCH + offset * timedelta(seconds=window_s)


def align_up(moment: datetime, window_s: int) -> datetime:
    down = align_down(moment, window_s)
    return down if down == moment else down + timedelta(seconds=window_s)


def window_at(moment: datetime, window_s: int) -> Window:
    start = align_down(moment, window_s)
    return Window(start, start + timedelta(seconds=window_s))


def windows(start: datetime, end: datetime, window_s: int) -> Iterator[Window]:
    """The windows that start in [align_down(start), end), oldest first."""
    step = timedelta(seconds=window_s)
    moment = align_down(start, window_s)
    while moment < end:
        yield Window(moment, moment + step)
        moment += step


def count_windows(start: datetime, end: datetime, window_s: int) -> int:
    first = align_down(start, window_s)
    return max(0, -((first - end) // timedelta(seconds=window_s)))


def closed_until(now: datetime, window_s: int, grace_s: int) -> datetime:
    """The end of the last window that is exportable at `now` (closed for at least the grace period)."""
    return align_down(now - timedelta(seconds=grace_s), window_s)


def exportable_from(now: datetime, window_s: int) -> datetime:
    """The start of the oldest window whose start is still an acceptable Stripe event timestamp."""
    return align_up(now - STRIPE_MAX_PAST + STRIPE_PAST_MARGIN, window_s)


def identifier(tenant_id: str, meter: Meter, window_start: datetime, seq: int) -> str:
    """Deterministic per tenant x meter x window x sequence (0: the first send, 1, 2...: late corrections), so a
    re-run or a retry names the same event and Stripe refuses the duplicate."""
    stamp = window_start.astimezone(UTC).strftime("%Y%m%dT%H%MZ" if window_start.second == 0 else "%Y%m%dT%H%M%SZ")
    text = f"{IDENTIFIER_PREFIX}-{tenant_id}-{meter.short}-{stamp}-{seq}"
    if len(text) <= IDENTIFIER_MAX_LEN:
        return text
    digest = hashlib.sha256(tenant_id.encode()).hexdigest()[:32]
    return f"{IDENTIFIER_PREFIX}-h{digest}-{meter.short}-{stamp}-{seq}"


MeterKey = tuple[str, str]  # (tenant id, Stripe event name)


def ledger_values(rows: list[TenantTotals], meters: tuple[Meter, ...]) -> dict[MeterKey, int]:
    """What the ledger bills per tenant x meter for the rows' range."""
    return {(row.tenant_id, meter.event_name): meter.value(row) for row in rows for meter in meters}

"""The storage contract for the token ledger (one entry per request, the source of truth for billing) and for the
meter exporter's outbox of Stripe meter events."""

from __future__ import annotations

from datetime import date, datetime
from enum import StrEnum
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from shared.fleet.embedding_pools import EMBEDDING_LEDGER_PREFIX
from shared.fleet.rerank_pools import RERANK_LEDGER_PREFIX

# Ledger entries of `/v1/embeddings` name their model `embedding:<pool>`. Their (prompt) tokens are billed on the
# embedding meter only: `totals` sums them apart, never into the chat prompt tokens.
EMBEDDING_MODEL_PREFIX = EMBEDDING_LEDGER_PREFIX  # an embedding model's ledger name: the prefix, then its pool
# Entries of `/v1/rerank` name their model `rerank:<pool>`: their pair tokens go to the re-rank meter only.
RERANK_MODEL_PREFIX = RERANK_LEDGER_PREFIX

# What price a request's tokens are billed at: `standard` (interactive) or `batch` (a line of a batch, at the batch
# price: functions/batches/). Batch tokens are summed apart and sent on the batch meters, never mixed in.
PriceClass = Literal["standard", "batch"]


class Outcome(StrEnum):
    COMPLETED = "completed"  # the model finished (stop or length)
    ABORTED = "aborted"  # the client went away or the worker failed mid-answer: billed for what was generated
    FILTERED = "filtered"  # blocked or halted by a safety filter
    FAILED = "failed"  # no answer at all (billed 0)


class LedgerEntry(BaseModel):
    request_id: str = Field(min_length=1, max_length=100)
    tenant_id: str
    key_id: str | None
    model: str
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    cached_tokens: int = Field(ge=0)
    outcome: Outcome
    created_at: datetime  # UTC; the time the request ended
    price_class: PriceClass = "standard"


class UsageRow(BaseModel):
    """One tenant's usage of one model at one price class on one UTC day."""

    day: date
    model: str
    price_class: PriceClass = "standard"
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


class TenantTotals(BaseModel):
    """One tenant's totals over a time range (what the meter exporter bills). The token counts are chat's (and
    moderations'); embedding entries count only in `embedding_tokens`, re-rank entries only in `rerank_tokens` (and
    both in `requests`); batch entries only in the
    `batch_*` counts (and in `requests`), by the same split."""

    tenant_id: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    embedding_tokens: int = 0
    rerank_tokens: int = 0
    batch_prompt_tokens: int = 0
    batch_completion_tokens: int = 0
    batch_cached_tokens: int = 0
    batch_embedding_tokens: int = 0
    batch_rerank_tokens: int = 0  # none today (a batch has no /v1/rerank lines): the split is the same for both classes


class LedgerStore(Protocol):
    def record(self, entry: LedgerEntry) -> bool:
        """Write `entry` durably; idempotent by request id: True if written, False if that id was already recorded
        (the stored entry is left exactly as it was)."""
        ...

    def usage(self, tenant_id: str, start: datetime, end: datetime) -> list[UsageRow]:
        """The tenant's entries with start <= created_at < end, summed per UTC day, model and price class (in that
        order)."""
        ...

    def totals(self, start: datetime, end: datetime) -> list[TenantTotals]:
        """Every tenant's entries with start <= created_at < end, summed per tenant (tenant id order)."""
        ...

    def close(self) -> None: ...


class MeterSend(BaseModel):
    """One Stripe meter event: written as pending before it is sent, marked sent once Stripe has it."""

    identifier: str = Field(min_length=1, max_length=100)  # deterministic; Stripe refuses a duplicate
    tenant_id: str
    customer_id: str
    meter: str  # the Stripe meter's event_name
    window_start: datetime
    value: int
    sent_at: datetime | None = None  # None: pending


class MeterStateStore(Protocol):
    """The exporter's durable state: the outbox of meter events and the cursor of the last closed window exported."""

    def add_pending(self, send: MeterSend) -> bool:
        """Insert a pending send; False (nothing changed) if its identifier exists already."""
        ...

    def mark_sent(self, identifier: str, at: datetime) -> None: ...

    def pending(self) -> list[MeterSend]:
        """Sends written but not yet confirmed, oldest window first."""
        ...

    def sends(self, start: datetime, end: datetime) -> list[MeterSend]:
        """Every send (pending or sent) for windows with start <= window_start < end."""
        ...

    def get_cursor(self) -> datetime | None:
        """The end of the last window whose sends are all confirmed (None: nothing exported yet)."""
        ...

    def set_cursor(self, window_end: datetime) -> None: ...

    def close(self) -> None: ...

"""The batch store's contract: batches (`/v1/batches`) with their status, lease and counts, and each line's result,
kept durably as it finishes. SQLite embedded (shared/storage/sqlite/batches.py); DynamoDB, with S3 for large results,
deployed (shared/storage/aws/batches.py).

A line's result is written once (`record_line` is idempotent by line number) in the same atomic write that adds it to
the batch's counts and usage, so a runner killed at any point leaves counts that match the lines kept, and the next
runner runs exactly the lines that have no result. Status moves only by `advance`, a conditional write (from the
statuses named, and for a runner only while it holds the lease), so a cancel and a runner never overwrite each other.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel, Field

from shared.wire.batches_api import BatchError, BatchStatus


def new_batch_id() -> str:
    return "batch_" + secrets.token_hex(16)


class StoredBatch(BaseModel):
    id: str
    tenant_id: str
    key_id: str | None  # whose key created it: its lines run as that key
    endpoint: str
    input_file_id: str
    completion_window: str = "24h"
    status: BatchStatus
    created_at: datetime
    expires_at: datetime
    in_progress_at: datetime | None = None
    finalizing_at: datetime | None = None
    completed_at: datetime | None = None
    failed_at: datetime | None = None
    expired_at: datetime | None = None
    cancelling_at: datetime | None = None
    cancelled_at: datetime | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list[BatchError] = Field(default_factory=list)  # the input file's problems (a `failed` batch)
    model: str | None = None
    metadata: dict[str, str] | None = None
    output_expires_after_s: int | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    claim_owner: str | None = None
    claim_until: datetime | None = None


class BatchUpdate(BaseModel):
    """What `advance` writes: only the fields set."""

    status: BatchStatus | None = None
    in_progress_at: datetime | None = None
    finalizing_at: datetime | None = None
    completed_at: datetime | None = None
    failed_at: datetime | None = None
    expired_at: datetime | None = None
    cancelling_at: datetime | None = None
    cancelled_at: datetime | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list[BatchError] | None = None
    model: str | None = None
    total: int | None = None

    def applied_to(self, batch: StoredBatch) -> StoredBatch:
        return batch.model_copy(update={name: getattr(self, name) for name in self.model_fields_set})


class LineResult(BaseModel):
    """One line's outcome: the endpoint's answer (`status_code` and `body`, an OpenAI error object when not 200), or
    `error_code` for a line that never ran (expired, cancelled)."""

    tenant_id: str
    batch_id: str
    line: int = Field(ge=0)  # 0-based, in input order
    custom_id: str
    request_id: str
    status_code: int | None = None
    body: dict[str, Any] | None = None
    error_code: str | None = None
    error_message: str | None = None
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0

    @property
    def ok(self) -> bool:
        return self.status_code == 200


class BatchStore(Protocol):
    def create(self, batch: StoredBatch) -> None: ...

    def get(self, tenant_id: str, batch_id: str) -> StoredBatch | None: ...

    def list(self, tenant_id: str, *, after: str | None, limit: int) -> list[StoredBatch]:
        """The tenant's batches, newest first, after the batch `after` (a cursor)."""
        ...

    def active(self) -> Iterator[StoredBatch]:
        """Every batch of every tenant that is not final (the runner's walk)."""
        ...

    def claim(self, tenant_id: str, batch_id: str, owner: str, until: datetime, now: datetime) -> bool:
        """Take or renew the lease on running an active batch, atomically: True when `owner` now holds it until
        `until`; False when another owner's lease runs past `now`, or the batch is final or gone."""
        ...

    def advance(
        self, tenant_id: str, batch_id: str, update: BatchUpdate, *, from_statuses: frozenset[str], owner: str | None
    ) -> StoredBatch | None:
        """Write `update` if the batch's status is one of `from_statuses` (and, with `owner`, the lease is that
        owner's), atomically; the batch as written, or None when the condition failed (nothing changed)."""
        ...

    def record_line(self, result: LineResult) -> bool:
        """Keep a line's result and add it to the batch's counts and usage in one atomic write; False (nothing
        changed) if that line already has a result."""
        ...

    def lines(self, tenant_id: str, batch_id: str) -> Iterator[LineResult]:
        """The batch's line results in line order."""
        ...

    def done_lines(self, tenant_id: str, batch_id: str) -> set[int]: ...

    def delete_tenant(self, tenant_id: str) -> int:
        """Erase every batch of the tenant and its line results (account erasure); how many batches."""
        ...

    def close(self) -> None: ...

"""`/v1/batches` behind the router: create a batch over an uploaded JSONL file (checked by the runner, which moves it
from `validating`), retrieve, list and cancel a tenant's batches (another tenant's id is a 404)."""

from __future__ import annotations

from datetime import timedelta

from anyio import to_thread

from functions.accounts.auth import Caller
from functions.batches.runner import BatchRunner
from functions.files.files_service import FilesService
from shared.errors import InvalidRequestError, NotFoundError
from shared.storage.batches import BatchStore, BatchUpdate, StoredBatch, new_batch_id
from shared.storage.timestamps import utc_now
from shared.wire.batches_api import (
    BatchErrors,
    BatchList,
    BatchObject,
    BatchRequestCounts,
    BatchUsage,
    CreateBatchRequest,
    InputTokensDetails,
)

COMPLETION_WINDOW = timedelta(hours=24)
CANCELLABLE = frozenset({"validating", "in_progress"})


def _time(moment: object) -> int | None:
    return None if moment is None else int(moment.timestamp())  # type: ignore[attr-defined]


def batch_object(batch: StoredBatch) -> BatchObject:
    times = {
        name: _time(getattr(batch, name))
        for name in (
            "in_progress_at", "expires_at", "finalizing_at", "completed_at", "failed_at", "expired_at",
            "cancelling_at", "cancelled_at",
        )
    }  # fmt: skip
    return BatchObject(
        id=batch.id,
        endpoint=batch.endpoint,
        model=batch.model,
        errors=BatchErrors(data=batch.errors) if batch.errors else None,
        input_file_id=batch.input_file_id,
        completion_window=batch.completion_window,
        status=batch.status,
        output_file_id=batch.output_file_id,
        error_file_id=batch.error_file_id,
        created_at=int(batch.created_at.timestamp()),
        request_counts=BatchRequestCounts(total=batch.total, completed=batch.completed, failed=batch.failed),
        usage=BatchUsage(
            input_tokens=batch.input_tokens,
            input_tokens_details=InputTokensDetails(cached_tokens=batch.cached_tokens),
            output_tokens=batch.output_tokens,
            total_tokens=batch.input_tokens + batch.output_tokens,
        ),
        metadata=batch.metadata,
        **times,
    )


def not_found(batch_id: str) -> NotFoundError:
    return NotFoundError(f"No batch found with id '{batch_id}'.", param="batch_id")


class BatchesService:
    def __init__(self, store: BatchStore, files: FilesService, runner: BatchRunner | None) -> None:
        self.store = store
        self.files = files
        self.runner = runner  # None where this process runs no batches (the scheduled job does)

    async def create(self, caller: Caller, request: CreateBatchRequest) -> BatchObject:
        record = await to_thread.run_sync(self.files.backends.files.get_file, caller.tenant.id, request.input_file_id)
        if record is None:
            raise NotFoundError(f"No such File object: {request.input_file_id}", param="input_file_id")
        if record.purpose != "batch":
            raise InvalidRequestError(
                f"File {request.input_file_id} has purpose '{record.purpose}'; a batch's input file is uploaded with "
                "purpose `batch`.",
                param="input_file_id",
                code="invalid_value",
            )
        now = utc_now()
        batch = StoredBatch(
            id=new_batch_id(), tenant_id=caller.tenant.id, key_id=caller.key.id, endpoint=request.endpoint,
            input_file_id=request.input_file_id, completion_window=request.completion_window, status="validating",
            created_at=now, expires_at=now + COMPLETION_WINDOW, metadata=request.metadata,
            output_expires_after_s=request.output_expires_after.seconds if request.output_expires_after else None,
        )  # fmt: skip
        await to_thread.run_sync(self.store.create, batch)
        if self.runner is not None:
            self.runner.nudge()
        return batch_object(batch)

    async def get(self, caller: Caller, batch_id: str) -> BatchObject:
        batch = await to_thread.run_sync(self.store.get, caller.tenant.id, batch_id)
        if batch is None:
            raise not_found(batch_id)
        return batch_object(batch)

    async def list(self, caller: Caller, after: str | None, limit: int) -> BatchList:
        batches = await to_thread.run_sync(lambda: self.store.list(caller.tenant.id, after=after, limit=limit + 1))
        data = [batch_object(b) for b in batches[:limit]]
        return BatchList(
            data=data,
            first_id=data[0].id if data else None,
            last_id=data[-1].id if data else None,
            has_more=len(batches) > limit,
        )

    async def cancel(self, caller: Caller, batch_id: str) -> BatchObject:
        """`cancelling` now; the runner stops starting lines and finalizes it `cancelled` with the results so far."""
        batch = await to_thread.run_sync(self.store.get, caller.tenant.id, batch_id)
        if batch is None:
            raise not_found(batch_id)
        if batch.status in ("cancelling", "cancelled"):
            return batch_object(batch)
        update = BatchUpdate(status="cancelling", cancelling_at=utc_now())
        moved = await to_thread.run_sync(
            lambda: self.store.advance(caller.tenant.id, batch_id, update, from_statuses=CANCELLABLE, owner=None)
        )
        if moved is None:
            current = await to_thread.run_sync(self.store.get, caller.tenant.id, batch_id)
            status = current.status if current is not None else batch.status
            if status in ("cancelling", "cancelled") and current is not None:
                return batch_object(current)
            raise InvalidRequestError(
                f"Cannot cancel a batch with status '{status}'.", param="batch_id", code="invalid_state"
            )
        if self.runner is not None:
            self.runner.cancelled(caller.tenant.id, batch_id)
        return batch_object(moved)

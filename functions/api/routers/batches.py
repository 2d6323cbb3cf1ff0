"""`/v1/batches` (OpenAI's Batch API): create a batch over an uploaded JSONL file, retrieve, list and cancel
(functions/batches/service.py does the work; functions/batches/runner.py runs it)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from functions.accounts.auth import CurrentCaller
from functions.api.deps import BatchesServiceDep
from functions.api.openapi_description import error_responses
from shared.wire.batches_api import BATCH_ID_PATTERN, BatchList, BatchObject, CreateBatchRequest

router = APIRouter(prefix="/v1/batches", tags=["batches"])
# Unset optional fields are left out rather than sent as null: OpenAI's schema types them without null.
BatchId = Annotated[str, Path(pattern=BATCH_ID_PATTERN)]


@router.post("", response_model=BatchObject, response_model_exclude_none=True, responses=error_responses(404))
async def create_batch(body: CreateBatchRequest, caller: CurrentCaller, batches: BatchesServiceDep) -> BatchObject:
    return await batches.create(caller, body)


@router.get("", response_model=BatchList, response_model_exclude_none=True)
async def list_batches(
    caller: CurrentCaller,
    batches: BatchesServiceDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: Annotated[str | None, Query(max_length=128)] = None,
) -> BatchList:
    return await batches.list(caller, after, limit)


@router.get("/{batch_id}", response_model=BatchObject, response_model_exclude_none=True, responses=error_responses(404))
async def retrieve_batch(batch_id: BatchId, caller: CurrentCaller, batches: BatchesServiceDep) -> BatchObject:
    return await batches.get(caller, batch_id)


@router.post(
    "/{batch_id}/cancel", response_model=BatchObject, response_model_exclude_none=True, responses=error_responses(404)
)
async def cancel_batch(batch_id: BatchId, caller: CurrentCaller, batches: BatchesServiceDep) -> BatchObject:
    return await batches.cancel(caller, batch_id)

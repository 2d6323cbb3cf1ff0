"""Wire models of OpenAI's Batch API (`/v1/batches`): the create request, the batch object, an input line of the
uploaded JSONL and a line of the output and error files (docs/batches.md).

A field OpenAI's description does not define is a 400, as OpenAI refuses it. The endpoints a batch may name are the
ones fleetchat serves that OpenAI batches: chat completions, responses, embeddings, completions and moderations."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

BATCH_ID_PATTERN = r"^batch_[0-9a-f]{1,64}$"
BATCH_ID_RE = re.compile(BATCH_ID_PATTERN)
BatchEndpoint = Literal["/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/completions", "/v1/moderations"]
BatchStatus = Literal[
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"
]
# Where a batch stops: no runner touches it again.
FINAL_STATUSES: frozenset[str] = frozenset({"failed", "completed", "expired", "cancelled"})
MAX_METADATA_KEYS = 16  # OpenAI's limit: 16 pairs, keys up to 64 characters, values up to 512
MAX_CUSTOM_ID = 512


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OutputExpiresAfter(_Strict):
    anchor: Literal["created_at"]
    seconds: int = Field(ge=3600, le=2_592_000)


class CreateBatchRequest(_Strict):
    input_file_id: str = Field(min_length=1, max_length=128)
    endpoint: BatchEndpoint
    completion_window: Literal["24h"]
    metadata: dict[str, str] | None = None
    output_expires_after: OutputExpiresAfter | None = None

    @field_validator("metadata")
    @classmethod
    def _bounded(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None and (
            len(value) > MAX_METADATA_KEYS or any(len(k) > 64 or len(v) > 512 for k, v in value.items())
        ):
            raise ValueError("metadata holds at most 16 pairs, keys of 64 characters and values of 512")
        return value


class BatchError(BaseModel):
    code: str
    message: str
    param: str | None = None
    line: int | None = None


class BatchErrors(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchError]


class BatchRequestCounts(BaseModel):
    total: int = 0
    completed: int = 0
    failed: int = 0


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class BatchUsage(BaseModel):
    input_tokens: int = 0
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int = 0
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int = 0


class BatchObject(BaseModel):
    """OpenAI's batch object (`GET /v1/batches/{id}`)."""

    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    model: str | None = None
    errors: BatchErrors | None = None
    input_file_id: str
    completion_window: str = "24h"
    status: BatchStatus
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int
    in_progress_at: int | None = None
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    request_counts: BatchRequestCounts = Field(default_factory=BatchRequestCounts)
    usage: BatchUsage = Field(default_factory=BatchUsage)
    metadata: dict[str, str] | None = None


class BatchList(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class BatchInputLine(_Strict):
    """One line of a batch's input file: a request to `url` with `body`, named by the caller's `custom_id`."""

    custom_id: str = Field(min_length=1, max_length=MAX_CUSTOM_ID)
    method: Literal["POST"]
    url: BatchEndpoint
    body: dict[str, Any]


class LineResponse(BaseModel):
    status_code: int
    request_id: str
    body: dict[str, Any]


class LineError(BaseModel):
    code: str
    message: str


class BatchOutputLine(BaseModel):
    """One line of the output file (a 200) or the error file (any other status, or `error` for a line never run)."""

    id: str
    custom_id: str
    response: LineResponse | None = None
    error: LineError | None = None

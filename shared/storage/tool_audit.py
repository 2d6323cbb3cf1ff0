"""The storage contract for the server-side tools' audit: one record per run the gateway made or refused (tenant,
tool, duration, exit status; input and output only where the tenant's policy allows content)."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Literal, Protocol

from pydantic import BaseModel, Field

CONTENT_MAX_CHARS = 16_000
# The whole-sandbox limits a run can run into (functions/sandbox/).
LimitHit = Literal["processes", "memory"]


class ToolRunStatus(StrEnum):
    OK = "ok"  # ran and succeeded (exit status 0, a value)
    ERROR = "error"  # ran and failed (a non-zero exit, an expression that does not evaluate, a sandbox that broke)
    TIMEOUT = "timeout"  # killed at its timeout
    QUOTA = "quota"  # not run: the tenant's runs for this tool in this window are used up
    BUSY = "busy"  # not run: every sandbox place the tenant (or the machine) has was taken; the request got a 429
    BREAKER_OPEN = "breaker_open"  # not run: the tool kept failing and its breaker is open


class ToolRunRecord(BaseModel):
    run_id: str = Field(min_length=1, max_length=100)
    request_id: str = Field(min_length=1, max_length=100)
    tenant_id: str = Field(min_length=1, max_length=100)
    key_id: str | None
    at: datetime  # UTC, when the run started (or was refused)
    tool: str = Field(min_length=1, max_length=64)
    status: ToolRunStatus
    duration_ms: int = Field(ge=0)
    exit_code: int | None = None  # the python tool's exit status (None: killed, refused, or not a process)
    # The whole-sandbox limits the run ran into ("processes", "memory"): an attempt to exhaust the machine, contained.
    limits_hit: list[LimitHit] = []
    # The run's arguments and result text, only where the tenant's policy allows content (None otherwise).
    input: str | None = Field(default=None, max_length=CONTENT_MAX_CHARS)
    output: str | None = Field(default=None, max_length=CONTENT_MAX_CHARS)

    @staticmethod
    def new_id() -> str:
        return f"tr_{uuid.uuid4().hex}"


class ToolAuditStore(Protocol):
    def record(self, record: ToolRunRecord) -> bool:
        """Write durably; idempotent by run_id: True if written, False if already there (unchanged)."""
        ...

    def list_for_tenant(
        self, tenant_id: str, start: datetime, end: datetime, *, limit: int = 100
    ) -> list[ToolRunRecord]:
        """The tenant's records with start <= at < end, newest first, at most `limit`."""
        ...

    def close(self) -> None: ...

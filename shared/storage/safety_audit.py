"""The storage contract for safety audit records: one per blocked request, per halted stream and per request whose
untrusted context was withheld, kept per tier."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, Field


class SafetyLayer(StrEnum):
    PRE = "pre"  # the gate on the whole conversation, before any worker sees it
    POST = "post"  # the filter on the generated stream
    CONTEXT = "context"  # text the user did not write, before it enters a prompt (retrieved passages)


class SafetyDetector(StrEnum):
    RULES = "rules"  # allow/deny lists and patterns
    CLASSIFIER = "classifier"  # MiniLM-derived embeddings + the trained head
    PII = "pii"  # outbound PII (enterprise opt-in)
    GUARD_MODEL = "guard_model"  # a guard model served as a chat-completions pool (Llama Guard)
    MODERATION_API = "moderation_api"  # a remote OpenAI-compatible /v1/moderations endpoint
    INJECTION_SCREEN = "injection_screen"  # the prompt-injection screen (functions/safety/injection_screen.py)


class SafetyAction(StrEnum):
    BLOCKED = "blocked"  # the request was refused (400 content_policy_violation)
    HALTED = "halted"  # the stream was stopped (finish_reason content_filter)
    WITHHELD = "withheld"  # untrusted text was kept out of the prompt; the request went on without it
    QUOTED = "quoted"  # untrusted text entered the prompt quoted as data, with a note not to follow it
    CARED = "cared"  # a self-harm ask was answered with the fixed supportive reply (functions/safety/care.py)


class SafetyAuditRecord(BaseModel):
    request_id: str = Field(min_length=1, max_length=100)
    tenant_id: str
    key_id: str | None
    at: datetime  # UTC
    layer: SafetyLayer
    detector: SafetyDetector
    category: str  # an OpenAI moderation category (e.g. "illicit/violent"), "jailbreak" or a PII kind
    score: float = Field(ge=0.0, le=1.0)
    policy_version: str
    action: SafetyAction
    model: str
    # A PII-redacted excerpt of the judged text, only where the tenant's policy allows it (None otherwise).
    content: str | None = Field(default=None, max_length=4000)
    # When the sweep may delete it (None: kept until deleted).
    expires_at: datetime | None


class SafetyAuditStore(Protocol):
    def record(self, record: SafetyAuditRecord) -> bool:
        """Write durably; idempotent by (request_id, layer): True if written, False if already there (unchanged)."""
        ...

    def list_for_tenant(
        self, tenant_id: str, start: datetime, end: datetime, *, limit: int = 100
    ) -> list[SafetyAuditRecord]:
        """The tenant's records with start <= at < end, newest first, at most `limit`."""
        ...

    def sweep(self, now: datetime, is_held: Callable[[str], bool], *, limit: int = 1000) -> int:
        """Delete up to `limit` records with expires_at <= now whose tenant is not under legal hold (`is_held`);
        the number deleted. Idempotent; needs no scan of unexpired records."""
        ...

    def count_due(self, now: datetime, is_held: Callable[[str], bool], *, limit: int = 1000) -> int:
        """How many records `sweep(now, is_held, limit=limit)` would delete now; deletes nothing (the dry run)."""
        ...

    def close(self) -> None: ...

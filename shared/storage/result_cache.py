"""The storage contract for the prompt/result cache: complete deterministic answers by (tenant, request key), each
with an expiry; shared by every gateway replica (docs/result-cache.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Protocol

from pydantic import BaseModel, Field

# An answer larger than this is not cached (a DynamoDB item holds 400 KB; a cache of huge answers buys little).
MAX_CONTENT_CHARS = 100_000


class CachedAnswer(BaseModel):
    """One complete answer. `key` is the hash of the normalised request, the pool, its model version and the safety
    post-policy (functions/chat/result_cache/key.py); the tenant partitions the cache: never shared across tenants."""

    tenant_id: str = Field(min_length=1)
    key: str = Field(pattern=r"^[0-9a-f]{64}$")
    pool: str
    model_version: str
    content: str = Field(max_length=MAX_CONTENT_CHARS)
    finish_reason: Literal["stop", "length"]
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    created_at: datetime  # UTC
    expires_at: datetime  # UTC; never served at or after it


class ResultCacheStore(Protocol):
    def get(self, tenant_id: str, key: str, now: datetime) -> CachedAnswer | None:
        """The tenant's answer under `key` if it has not expired at `now` (an expired one is never returned)."""
        ...

    def put(self, answer: CachedAnswer) -> None:
        """Store (or replace) the answer; a bounded store evicts expired entries, then the oldest, to make room."""
        ...

    def forget_tenant(self, tenant_id: str) -> int:
        """Delete every entry of the tenant (the account erase); how many were deleted."""
        ...

    def close(self) -> None: ...

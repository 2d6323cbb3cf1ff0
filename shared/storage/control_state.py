"""The storage contract for control state every gateway replica must agree on: resumable streams' events, small named
records (canary rollbacks, brownout pressure, gateway heartbeats, stop requests) and shared token buckets.

Two engines implement it: SQLite, a file in the data dir that every local gateway process opens (the embedded
default), and Redis (deployed: the hot tier; streams, hashes and Lua scripts make each operation one round trip).
What stays per gateway process on purpose is listed in docs/operations.md ("Shared control state").
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field

# A stream's record and events outlive its last write by at least this long when its owner never ends it (a gateway
# killed mid-stream): long enough for a client to learn the answer failed, short enough to free the store.
ORPHAN_TTL_S = 600.0


class StreamOpen(BaseModel):
    """What a gateway records when it starts generating a resumable response."""

    stream_id: str = Field(min_length=1, max_length=80)  # unique per response (the owner's choice)
    tenant_id: str = Field(min_length=1, max_length=200)
    owner: str = Field(min_length=1, max_length=80)  # the generating gateway's instance id
    headers: dict[str, str] = {}  # the response headers a resumed stream repeats
    # What another gateway needs to finish the answer if the owner dies (functions/chat/streams/takeover.py); None:
    # this answer cannot be taken over.
    takeover: dict[str, Any] | None = None


class StreamRecord(StreamOpen):
    """A stream as the store knows it: `first_seq`..`next_seq - 1` are the events it holds."""

    first_seq: int = 1
    next_seq: int = 1
    ended: bool = False


class StreamEvent(BaseModel):
    seq: int = Field(ge=1)
    data: bytes


class TokenBucket(BaseModel):
    """A bucket of `capacity` tokens refilled at `per_s` a second, shared by every gateway (it starts full)."""

    scope: str = Field(min_length=1, max_length=200)
    capacity: float = Field(gt=0)
    per_s: float = Field(gt=0)


class ControlState(Protocol):
    """Every call is one atomic step on the shared engine; a failure raises StoreUnavailableError."""

    # -- resumable streams ---------------------------------------------------------------------------------------------
    async def open_stream(self, stream: StreamOpen, names: list[str]) -> None:
        """Record a new stream, findable by its tenant and any of `names` (its request id, later its completion id)."""
        ...

    async def name_stream(self, tenant_id: str, name: str, stream_id: str) -> None:
        """Make the stream findable by one more name."""
        ...

    async def append_events(
        self, stream_id: str, owner: str, events: list[StreamEvent], *, ended: bool, max_bytes: int, ttl_s: float
    ) -> bool:
        """Add events (consecutive, after the last held) if `owner` still owns the stream; drop the oldest while the
        events held exceed `max_bytes` (one always stays). `ended`: no event follows; the stream is forgotten `ttl_s`
        later. False (nothing written) when the stream is gone or another gateway took it over."""
        ...

    async def claim_stream(self, stream_id: str, owner: str, new_owner: str) -> bool:
        """Make `new_owner` the stream's owner if `owner` still is and it has not ended (one claimant wins)."""
        ...

    async def find_stream(self, tenant_id: str, name: str) -> StreamRecord | None:
        """The tenant's stream by one of its names; None when unknown, expired or another tenant's."""
        ...

    async def read_events(self, stream_id: str, after: int, limit: int) -> list[StreamEvent]:
        """Up to `limit` held events after `after`, in order."""
        ...

    # -- named records -------------------------------------------------------------------------------------------------
    async def put(self, namespace: str, key: str, value: dict[str, object], ttl_s: float | None = None) -> None:
        """Set one record (replacing it); with `ttl_s` it is gone that many seconds later."""
        ...

    async def delete(self, namespace: str, key: str) -> None: ...

    async def records(self, namespace: str) -> dict[str, dict[str, object]]:
        """Every live record of the namespace, by key."""
        ...

    # -- shared budgets ------------------------------------------------------------------------------------------------
    async def take(self, bucket: TokenBucket) -> bool:
        """Take one token if the bucket holds one (True); nothing changes when it is empty (False)."""
        ...

    # -- leases (a bounded number of holders at once) ------------------------------------------------------------------
    async def acquire_lease(self, scope: str, holder: str, limit: int, ttl_s: float) -> bool:
        """Hold one of `scope`'s `limit` places as `holder` for `ttl_s` seconds (True); False, and nothing changes,
        when `limit` live holders have it. A holder that never releases (its gateway died) is gone at its expiry;
        acquiring again as the same holder renews it."""
        ...

    async def release_lease(self, scope: str, holder: str) -> None:
        """Give the place back (nothing when not held)."""
        ...

    async def aclose(self) -> None: ...

"""The shared control state in Redis (deployed): a stream's events in a Redis stream whose entry ids are the event
numbers, its record in a hash, named records in one hash per namespace, token buckets as Lua scripts on the server's
clock. Every operation is one round trip (a script or a pipeline), so the cost per streamed response is the number
of flushes, stated in `make bench`."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.storage.control_state import ORPHAN_TTL_S, StreamEvent, StreamOpen, StreamRecord, TokenBucket
from shared.storage.conversations import StoreUnavailableError

T = TypeVar("T")

# A stream's names outlive any stream they name (an ended stream is kept at most an hour: ResumeSettings).
NAME_TTL_S = ORPHAN_TTL_S + 3600

# KEYS: the stream's hash, its events. ARGV: ended (0/1), max bytes, ended ttl ms, orphan ttl ms, owner, then seq, data
# pairs. Only the owner writes (a gateway another took the stream over from is fenced out); events at or below the
# last held number are skipped, so a retried append never doubles one.
_APPEND = """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[5] then return 0 end
local size = tonumber(redis.call('HGET', KEYS[1], 'size'))
local following = tonumber(redis.call('HGET', KEYS[1], 'next_seq'))
local first = tonumber(redis.call('HGET', KEYS[1], 'first_seq'))
for i = 6, #ARGV, 2 do
  local seq = tonumber(ARGV[i])
  if seq >= following then
    redis.call('XADD', KEYS[2], ARGV[i] .. '-0', 'd', ARGV[i + 1])
    size = size + #ARGV[i + 1]
    following = seq + 1
  end
end
local max_bytes = tonumber(ARGV[2])
while size > max_bytes and redis.call('XLEN', KEYS[2]) > 1 do
  local oldest = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)[1]
  size = size - #oldest[2][2]
  redis.call('XDEL', KEYS[2], oldest[1])
  first = tonumber(string.match(oldest[1], '^(%d+)')) + 1
end
redis.call('HSET', KEYS[1], 'size', size, 'next_seq', following, 'first_seq', first, 'ended', ARGV[1])
local ttl = ARGV[4]
if ARGV[1] == '1' then ttl = ARGV[3] end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return 1
"""

# KEYS: the stream's hash. ARGV: the owner expected, the new owner, orphan ttl ms.
_CLAIM = """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'ended') ~= '0' then return 0 end
redis.call('HSET', KEYS[1], 'owner', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

# KEYS: the lease's sorted set (holder -> expiry ms). ARGV: holder, limit, ttl ms. The server's clock.
_LEASE = """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
"""

# KEYS: the bucket's hash. ARGV: capacity, tokens per second. The server's clock: one clock for every gateway.
_TAKE = """
local now = redis.call('TIME')
now = tonumber(now[1]) + tonumber(now[2]) / 1000000
local capacity, per_s = tonumber(ARGV[1]), tonumber(ARGV[2])
local held = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = capacity
if held[1] then tokens = math.min(capacity, tonumber(held[1]) + math.max(0, now - tonumber(held[2])) * per_s) end
local taken = 0
if tokens >= 1 then
  tokens = tokens - 1
  taken = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(capacity / per_s * 1000) + 1000)
return taken
"""


class RedisControlState:
    def __init__(
        self, url: str, *, prefix: str = "fleetchat", timeout_s: float = 1.0, clock: Callable[[], float] = time.time
    ) -> None:
        self._redis = aioredis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, decode_responses=False
        )
        self._prefix = prefix
        self._clock = clock
        self._append = self._redis.register_script(_APPEND)
        self._take = self._redis.register_script(_TAKE)
        self._claim = self._redis.register_script(_CLAIM)
        self._lease = self._redis.register_script(_LEASE)

    def _key(self, *parts: str) -> str:
        return ":".join((self._prefix, *parts))

    async def _call(self, operation: Awaitable[T]) -> T:
        try:
            return await operation
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailableError(f"Redis control state unavailable: {exc}") from exc

    # -- resumable streams ---------------------------------------------------------------------------------------------
    async def open_stream(self, stream: StreamOpen, names: list[str]) -> None:
        record = self._key("stream", stream.stream_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(record, self._key("events", stream.stream_id))
            pipe.hset(
                record,
                mapping={
                    "tenant_id": stream.tenant_id,
                    "owner": stream.owner,
                    "headers": json.dumps(stream.headers),
                    "first_seq": 1,
                    "next_seq": 1,
                    "size": 0,
                    "ended": 0,
                    "takeover": json.dumps(stream.takeover),
                },
            )
            pipe.pexpire(record, int(ORPHAN_TTL_S * 1000))
            for name in names:
                pipe.set(self._key("name", stream.tenant_id, name), stream.stream_id, ex=int(NAME_TTL_S))
            await self._call(pipe.execute())

    async def name_stream(self, tenant_id: str, name: str, stream_id: str) -> None:
        await self._call(self._redis.set(self._key("name", tenant_id, name), stream_id, ex=int(NAME_TTL_S)))

    async def append_events(
        self, stream_id: str, owner: str, events: list[StreamEvent], *, ended: bool, max_bytes: int, ttl_s: float
    ) -> bool:
        args: list[Any] = [int(ended), max_bytes, max(1, int(ttl_s * 1000)), int(ORPHAN_TTL_S * 1000), owner]
        for event in events:
            args += [event.seq, event.data]
        keys = [self._key("stream", stream_id), self._key("events", stream_id)]
        return bool(await self._call(self._append(keys=keys, args=args)))

    async def claim_stream(self, stream_id: str, owner: str, new_owner: str) -> bool:
        args = [owner, new_owner, int(ORPHAN_TTL_S * 1000)]
        return bool(await self._call(self._claim(keys=[self._key("stream", stream_id)], args=args)))

    async def find_stream(self, tenant_id: str, name: str) -> StreamRecord | None:
        stream_id = await self._call(self._redis.get(self._key("name", tenant_id, name)))
        if stream_id is None:
            return None
        stream_id = stream_id.decode()
        held = await self._call(self._redis.hgetall(self._key("stream", stream_id)))
        if not held or held.get(b"tenant_id", b"").decode() != tenant_id:
            return None
        return StreamRecord(
            stream_id=stream_id,
            tenant_id=tenant_id,
            owner=held[b"owner"].decode(),
            headers=json.loads(held[b"headers"]),
            first_seq=int(held[b"first_seq"]),
            next_seq=int(held[b"next_seq"]),
            ended=held[b"ended"] == b"1",
            takeover=json.loads(held.get(b"takeover", b"null")),
        )

    async def read_events(self, stream_id: str, after: int, limit: int) -> list[StreamEvent]:
        entries = await self._call(
            self._redis.xrange(self._key("events", stream_id), min=f"{after + 1}-0", max="+", count=limit)
        )
        return [StreamEvent(seq=int(entry_id.split(b"-")[0]), data=fields[b"d"]) for entry_id, fields in entries]

    # -- named records -------------------------------------------------------------------------------------------------
    async def put(self, namespace: str, key: str, value: dict[str, object], ttl_s: float | None = None) -> None:
        expires_at = None if ttl_s is None else self._clock() + ttl_s
        held = json.dumps({"value": value, "expires_at": expires_at})
        await self._call(self._redis.hset(self._key("records", namespace), key, held))

    async def delete(self, namespace: str, key: str) -> None:
        await self._call(self._redis.hdel(self._key("records", namespace), key))

    async def records(self, namespace: str) -> dict[str, dict[str, object]]:
        held = await self._call(self._redis.hgetall(self._key("records", namespace)))
        now, live, expired = self._clock(), {}, []
        for key, raw in held.items():
            record = json.loads(raw)
            if record["expires_at"] is not None and record["expires_at"] <= now:
                expired.append(key)
            else:
                live[key.decode()] = record["value"]
        if expired:  # forgotten by whoever reads them first (Redis 7.0 has no expiry per hash field)
            await self._call(self._redis.hdel(self._key("records", namespace), *expired))
        return live

    # -- shared budgets ------------------------------------------------------------------------------------------------
    async def take(self, bucket: TokenBucket) -> bool:
        taken = await self._call(
            self._take(keys=[self._key("bucket", bucket.scope)], args=[bucket.capacity, bucket.per_s])
        )
        return bool(taken)

    # -- leases --------------------------------------------------------------------------------------------------------
    async def acquire_lease(self, scope: str, holder: str, limit: int, ttl_s: float) -> bool:
        ttl_ms = max(1, int(ttl_s * 1000))
        return bool(await self._call(self._lease(keys=[self._key("lease", scope)], args=[holder, limit, ttl_ms])))

    async def release_lease(self, scope: str, holder: str) -> None:
        await self._call(self._redis.zrem(self._key("lease", scope), holder))

    async def aclose(self) -> None:
        await self._redis.aclose()

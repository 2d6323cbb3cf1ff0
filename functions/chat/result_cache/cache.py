"""The prompt/result cache for deterministic chat requests: look an answer up (after auth, limits and safety), and
remember a complete one; per tenant, per pool model version, TTL per tier, never anything with PII in it
(docs/result-cache.md). Serving a hit: functions/chat/result_cache/replay.py; the key: functions/result_cache_key.py.

A cache that cannot be reached is a miss, never an error: the request is answered by the model."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from anyio import to_thread
from prometheus_client import CollectorRegistry, Counter

from functions.chat.result_cache.key import request_key, texts_of, uncacheable_reason
from functions.chat.streams.continuation import ContinuingStream
from functions.chat.streams.relay import StreamRelay
from functions.control.request_accounting import TokenUsage
from functions.safety.pii import PiiDetector
from shared.fleet.tables import tables
from shared.fleet.tiers import Tier
from shared.settings import Settings
from shared.storage.accounts import Tenant, TenantPurpose
from shared.storage.result_cache import MAX_CONTENT_CHARS, CachedAnswer, ResultCacheStore
from shared.storage.timestamps import utc_now
from shared.wire.schemas import ChatCompletionRequest
from shared.wire.sse import DONE

log = logging.getLogger("fleetchat.result_cache")

RESULT_CACHE_LOOKUPS = "fleetchat_gateway_result_cache_lookups"  # exposed as ..._total
# On every chat response: hit, miss, bypass or uncacheable.
CACHE_HEADER = "x-fleetchat-cache"
CACHEABLE_FINISHES = frozenset({"stop", "length"})


class CacheOutcome(StrEnum):
    HIT = "hit"
    MISS = "miss"
    BYPASS = "bypass"  # the client said `cache-control: no-cache`
    UNCACHEABLE = "uncacheable"  # sampling, PII in the request, or the tier's cache is off


class ResultCacheMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.lookups = Counter(
            RESULT_CACHE_LOOKUPS,
            "Chat requests by pool and result-cache outcome: hit, miss, bypass, uncacheable (hit rate hit/(hit+miss)).",
            ["pool", "outcome"],
            registry=registry,
        )


@dataclass(frozen=True)
class Directives:
    """The request's `cache-control`: no-cache (answer from the model) and no-store (keep nothing)."""

    no_cache: bool = False
    no_store: bool = False

    @classmethod
    def parse(cls, header: str | None) -> Directives:
        names = {part.strip().split("=", 1)[0].lower() for part in (header or "").split(",")}
        return cls(no_cache="no-cache" in names, no_store="no-store" in names)


@dataclass(frozen=True)
class Lookup:
    """One request's cache decision: its outcome, and what a miss may store (key None: nothing)."""

    outcome: CacheOutcome
    pool: str
    tenant_id: str = ""
    key: str | None = None
    model_version: str = ""
    ttl_s: int = 0
    hit: CachedAnswer | None = None

    @property
    def may_store(self) -> bool:
        return self.key is not None and self.ttl_s > 0


class ResultCache:
    def __init__(
        self,
        store: ResultCacheStore,
        pii: PiiDetector,
        metrics: ResultCacheMetrics,
        ttl_s: Callable[[Tier], int],
        *,
        seeds_honoured: bool,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.store = store
        self.pii = pii
        self.metrics = metrics
        self.ttl_s = ttl_s
        self.seeds_honoured = seeds_honoured
        self.clock = clock

    async def lookup(
        self,
        tenant: Tenant,
        pool: str,
        model_version: str,
        post_policy: str,
        request: ChatCompletionRequest,
        cache_control: str | None,
    ) -> Lookup:
        """The cached answer for this request, or why there is none (counted by pool and outcome)."""
        found = await self._lookup(tenant, pool, model_version, post_policy, request, cache_control)
        self.metrics.lookups.labels(pool, found.outcome.value).inc()
        return found

    async def _lookup(
        self,
        tenant: Tenant,
        pool: str,
        model_version: str,
        post_policy: str,
        request: ChatCompletionRequest,
        cache_control: str | None,
    ) -> Lookup:
        ttl_s = self.ttl_s(tenant.tier)
        # The eval job's tenants measure the model (quality, latency, goodput): their requests always reach it.
        if ttl_s <= 0 or tenant.purpose is TenantPurpose.EVAL:
            return Lookup(CacheOutcome.UNCACHEABLE, pool)
        if uncacheable_reason(request, seeds_honoured=self.seeds_honoured) is not None:
            return Lookup(CacheOutcome.UNCACHEABLE, pool)
        if await to_thread.run_sync(self._any_pii, texts_of(request)):
            return Lookup(CacheOutcome.UNCACHEABLE, pool)  # never stored, so never worth looking for
        directives, tenant_id = Directives.parse(cache_control), tenant.id
        key = request_key(request, pool, model_version, post_policy)
        stored = Lookup(CacheOutcome.MISS, pool, tenant_id, None if directives.no_store else key, model_version, ttl_s)
        if directives.no_cache:
            return Lookup(CacheOutcome.BYPASS, pool, stored.tenant_id, stored.key, model_version, ttl_s)
        try:
            hit = await to_thread.run_sync(self.store.get, tenant_id, key, self.clock())
        except Exception as exc:  # a cache outage is a miss, never a failed request
            log.warning("result cache lookup failed (%s): answered by the model", type(exc).__name__)
            return stored
        if hit is None or hit.pool != pool or hit.model_version != model_version:
            return stored
        return Lookup(CacheOutcome.HIT, pool, tenant_id, None, model_version, ttl_s, hit)

    async def remember(
        self,
        lookup: Lookup,
        *,
        pool: str,
        model_version: str,
        content: str,
        finish_reason: str | None,
        prompt_tokens: int,
        completion_tokens: int,
    ) -> bool:
        """Store a complete answer under the lookup's key, unless anything makes it unfit: another pool or version
        answered than was looked up, it did not finish by stop/length, it is too large, or it holds PII. Whoever
        calls this has already judged the answer unfiltered and not continued after a failure."""
        if not lookup.may_store or lookup.key is None:
            return False
        if pool != lookup.pool or model_version != lookup.model_version or finish_reason not in CACHEABLE_FINISHES:
            return False
        if len(content) > MAX_CONTENT_CHARS or await to_thread.run_sync(self._any_pii, [content]):
            return False
        now = self.clock()
        try:
            answer = CachedAnswer(
                tenant_id=lookup.tenant_id,
                key=lookup.key,
                pool=pool,
                model_version=model_version,
                content=content,
                finish_reason=finish_reason,  # type: ignore[arg-type]  # checked above
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                created_at=now,
                expires_at=now + timedelta(seconds=lookup.ttl_s),
            )
            await to_thread.run_sync(self.store.put, answer)
        except Exception as exc:  # the answer was delivered and billed; a cache that cannot keep it changes nothing
            log.warning("result cache store failed (%s): answer not cached", type(exc).__name__)
            return False
        return True

    async def remember_completion(
        self, lookup: Lookup, completion: dict[str, Any], *, completed: bool, pool: str, model_version: str
    ) -> bool:
        """Store a whole (non-streamed) answer that completed unfiltered; tool calls are never cached (their finish
        reason is `tool_calls`)."""
        if not completed or not lookup.may_store:
            return False
        choice = (completion.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        usage = TokenUsage.from_openai(completion.get("usage"))
        if usage is None or message.get("tool_calls") or not isinstance(message.get("content"), str):
            return False
        return await self.remember(
            lookup,
            pool=pool,
            model_version=model_version,
            content=message["content"],
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
        )

    async def remember_stream(
        self, lookup: Lookup, relay: StreamRelay, stream: ContinuingStream, *, pool: str, model_version: str
    ) -> bool:
        """Store a streamed answer at its end if it completed on its first leg: not halted by the post-filter, no
        error event, never continued on another replica after a failure."""
        capture = relay.capture
        if relay.halting or not capture.completed or stream.dead or stream.answer.legs > 1:
            return False
        usage = TokenUsage.from_openai(capture.usage)
        if usage is None:
            return False
        return await self.remember(
            lookup,
            pool=pool,
            model_version=model_version,
            content=capture.text,
            finish_reason=capture.finish_reason,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
        )

    def _any_pii(self, texts: list[str]) -> bool:
        return any(self.pii.find(text) for text in texts if text)


async def storing(events: AsyncIterator[bytes], before_done: Callable[[], Awaitable[None]]) -> AsyncIterator[bytes]:
    """Pass a relayed stream through, awaiting `before_done()` before its `[DONE]`, so an answer is in the cache by
    the time its client can send the same request again."""
    async for event in events:
        if event == DONE:
            try:
                await before_done()
            except Exception as exc:  # the cache must never break a stream the client is reading
                log.warning("result cache store failed (%s): answer not cached", type(exc).__name__)
        yield event


def ttl_for(settings: Settings) -> Callable[[Tier], int]:
    """Each tier's TTL: the settings' override, else the tier table's."""

    def ttl(tier: Tier) -> int:
        return settings.result_cache.ttl_s.get(tier, tables().tiers[tier].result_cache_ttl_s)

    return ttl


def result_cache_for(settings: Settings, store: ResultCacheStore, metrics: ResultCacheMetrics) -> ResultCache:
    """The gateway's cache: a fixed seed counts as deterministic only deployed, where vLLM honours it per request.
    Not locally, on either engine: the transformers engine ignores `seed`, and the llama.cpp engine, though each
    request draws from its own seeded generator, computes a prompt's logits differently depending on what shares its
    batch (one unified KV pool; llama.cpp #24962), so a seeded answer alone and the same request beside others can
    differ from the first token (tests/integration/workers/test_llama_engine.py, docs/engine.md)."""
    from functions.safety.pii import pii_detector

    deployed = settings.environment == "deployed"
    return ResultCache(store, pii_detector(), metrics, ttl_for(settings), seeds_honoured=deployed)

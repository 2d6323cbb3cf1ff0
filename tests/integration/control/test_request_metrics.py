"""Every outcome shows up in the gateway's /metrics: chat requests by pool and status (400, 401, 404, 413, 429, 503,
200), every endpoint by route template, the per-tier SLO histograms, goodput and spend; against a real gateway on
loopback with stand-in workers, the openai SDK and raw httpx as clients."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from functions.app import create_app
from shared.api_keys import hash_api_key, new_api_key
from shared.fleet.tables import tables
from shared.fleet.tiers import LimitOverrides, Tier
from shared.settings import Settings
from shared.storage.accounts import TenantChanges, TenantPurpose
from shared.storage.sqlite.accounts import SQLiteStore
from tests.support.processes import free_port
from tests.support.rate_windows import early_in_a_window
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import PROMPT_TOKENS, scripted_worker
from tests.support.stand_ins.stand_in import stand_in_worker

SCRIPT = "Lisbon is a city of seven hills and yellow trams."
PIECES = -(-len(SCRIPT) // 4)  # the scripted worker sends 4 characters per chunk, one "token" each
CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]


@dataclass
class Stack:
    url: str
    keys: dict[str, str]  # plus, free (its only pool is down), limited (1 RPM, pool down), eval (a free eval tenant)

    def sdk(self, who: str = "plus", key: str | None = None) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key or self.keys[who], max_retries=0)

    def auth(self, who: str = "plus") -> dict[str, str]:
        return {"authorization": f"Bearer {self.keys[who]}"}


def _tenant(store: SQLiteStore, name: str, tier: Tier, purpose: TenantPurpose = TenantPurpose.CUSTOMER) -> tuple:
    tenant = store.create_tenant(name, tier, purpose=purpose)
    key = new_api_key()
    store.add_api_key(tenant.id, hash_api_key(key), name)
    return tenant, key


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """`flagship` is served by a scripted worker; `mini` has no live replica, so the free tier (mini only) gets 503s."""
    store = SQLiteStore(tmp_path / "fleetchat.db")
    keys = {}
    _, keys["plus"] = _tenant(store, "plus", Tier.PLUS)
    _, keys["free"] = _tenant(store, "free", Tier.FREE)
    limited, keys["limited"] = _tenant(store, "limited", Tier.FREE)
    store.update_tenant(limited.id, TenantChanges(limits=LimitOverrides(key_rpm=1, tenant_rpm=1)))
    _, keys["eval"] = _tenant(store, "eval", Tier.PLUS, TenantPurpose.EVAL)
    dead = f"http://127.0.0.1:{free_port()}"
    with serve(scripted_worker(SCRIPT)) as worker:
        urls = {"mini": [dead], "flagship": [worker]}
        settings = Settings(data_dir=tmp_path, worker_urls=urls, pools=list(urls))
        with serve(create_app(settings, store=store)) as url:
            yield Stack(url, keys)


def _samples(url: str) -> list[tuple[str, dict[str, str], float]]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples]


def _settled(url: str, name: str, expected: float, **labels: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples once `name{labels}` reached `expected`: a response is counted when its last byte has been sent,
    which can be just after the client read it, so a scrape right after a stream may race the count."""
    deadline = time.monotonic() + 10
    while True:
        samples = _samples(url)
        if _value(samples, name, **labels) >= expected or time.monotonic() > deadline:
            return samples
        time.sleep(0.05)


def _value(samples: list, name: str, **labels: str) -> float:
    """Sum of the samples called `name` whose labels include `labels`."""
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == w for k, w in labels.items()))


def test_every_chat_outcome_is_counted_by_status(stack: Stack) -> None:
    plus = stack.sdk()
    streams = 3
    for _ in range(streams):
        chunks = list(plus.chat.completions.create(model="flagship", messages=HI, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == SCRIPT
    whole = plus.chat.completions.create(model="flagship", messages=HI)
    assert whole.choices[0].message.content == SCRIPT
    with pytest.raises(openai.BadRequestError):  # out of range: a validation error
        plus.chat.completions.create(model="flagship", messages=HI, temperature=7)
    bad_json = httpx.post(
        f"{stack.url}{CHAT}", content=b"{not json", headers={**stack.auth(), "content-type": "application/json"}
    )
    assert bad_json.status_code == 400
    with pytest.raises(openai.AuthenticationError):
        stack.sdk(key="sk-wrong").chat.completions.create(model="flagship", messages=HI)
    with pytest.raises(openai.NotFoundError):
        plus.chat.completions.create(model="gpt-secret-codename", messages=HI)
    too_large = httpx.post(
        f"{stack.url}{CHAT}",
        content=b"x" * (1024 * 1024 + 1),
        headers={**stack.auth(), "content-type": "application/json"},
    )
    assert too_large.status_code == 413
    with pytest.raises(openai.InternalServerError) as unavailable:  # the free tier's only pool is down
        stack.sdk("free").chat.completions.create(model="mini", messages=HI, stream=True)
    assert unavailable.value.status_code == 503
    limited = stack.sdk("limited")
    early_in_a_window()
    with pytest.raises(openai.InternalServerError):
        limited.chat.completions.create(model="mini", messages=HI)  # admitted (the one request a minute), then 503
    with pytest.raises(openai.RateLimitError):
        limited.chat.completions.create(model="mini", messages=HI)

    samples = _settled(stack.url, "fleetchat_gateway_requests_total", 1, model="mini", status="429")
    requests = "fleetchat_gateway_requests_total"
    assert _value(samples, requests, model="flagship", status="200") == streams + 1
    assert _value(samples, requests, model="unknown", status="400") == 2
    assert _value(samples, requests, model="unknown", status="401") == 1
    assert _value(samples, requests, model="unknown", status="404") == 1
    assert _value(samples, requests, model="unknown", status="413") == 1
    assert _value(samples, requests, model="mini", status="503") == 2
    assert _value(samples, requests, model="mini", status="429") == 1
    # A bad parameter is refused before routing: its model label is "unknown", so flagship holds only the answers.
    assert _value(samples, requests, model="flagship") == streams + 1


def test_unknown_models_and_paths_never_become_label_values(stack: Stack) -> None:
    with pytest.raises(openai.NotFoundError):
        stack.sdk().chat.completions.create(model="gpt-secret-codename", messages=HI)
    assert httpx.get(f"{stack.url}/v1/no-such-endpoint-xyz").status_code == 404
    text = httpx.get(f"{stack.url}/metrics").text
    assert "gpt-secret-codename" not in text
    assert "no-such-endpoint-xyz" not in text


def test_every_endpoint_is_counted_by_route_template(stack: Stack) -> None:
    missing = "conv_" + "0" * 32
    assert httpx.get(f"{stack.url}/v1/conversations/{missing}", headers=stack.auth()).status_code == 404
    assert httpx.get(f"{stack.url}/v1/conversations", headers=stack.auth()).status_code == 200
    assert httpx.get(f"{stack.url}/v1/models").status_code == 401
    assert httpx.get(f"{stack.url}/nowhere").status_code == 404
    httpx.get(f"{stack.url}/metrics")
    limited = stack.sdk("limited")
    early_in_a_window()
    with pytest.raises(openai.InternalServerError):
        limited.chat.completions.create(model="mini", messages=HI)
    with pytest.raises(openai.RateLimitError):
        limited.chat.completions.create(model="mini", messages=HI)
    samples = _settled(stack.url, "fleetchat_gateway_http_responses_total", 1, route=CHAT, status="429")
    responses = "fleetchat_gateway_http_responses_total"
    route = "/v1/conversations/{conversation_id}"
    assert _value(samples, responses, route=route, method="GET", status="404") == 1
    assert _value(samples, responses, route="/v1/conversations", method="GET", status="200") == 1
    assert _value(samples, responses, route="/v1/models", method="GET", status="401") == 1
    assert _value(samples, responses, route="unmatched", method="GET", status="404") == 1
    assert _value(samples, responses, route="/metrics", method="GET", status="200") >= 1
    assert _value(samples, responses, route=CHAT, method="POST", status="503") == 1
    assert _value(samples, responses, route=CHAT, method="POST", status="429") == 1
    assert not [lab for n, lab, _ in samples if n == responses and missing in lab.get("route", "")]


def test_streams_feed_the_tier_histograms_goodput_and_spend(stack: Stack) -> None:
    streams = 2
    for who in ("plus", "eval"):
        for _ in range(streams):
            list(stack.sdk(who).chat.completions.create(model="flagship", messages=HI, stream=True))
    stack.sdk().chat.completions.create(model="flagship", messages=HI)  # non-streamed: end-to-end only
    with pytest.raises(openai.InternalServerError):
        stack.sdk("free").chat.completions.create(model="mini", messages=HI, stream=True)

    samples = _settled(stack.url, "fleetchat_gateway_goodput_total", 1, tier="free", met="false")
    plus = {"tier": "plus", "pool": "flagship"}
    assert _value(samples, "fleetchat_gateway_ttft_seconds_count", **plus) == streams
    assert _value(samples, "fleetchat_gateway_inter_token_seconds_count", **plus) == streams * (PIECES - 1)
    assert _value(samples, "fleetchat_gateway_e2e_seconds_count", **plus) == streams + 1
    assert _value(samples, "fleetchat_gateway_goodput_total", **plus) == streams  # judged: streams only
    # The eval tenant's traffic is labelled apart from its tier's.
    assert _value(samples, "fleetchat_gateway_goodput_total", tier="eval", pool="flagship") == streams
    assert _value(samples, "fleetchat_gateway_ttft_seconds_count", tier="eval", pool="flagship") == streams
    # A 5xx after routing misses the SLO; nothing was generated, so nothing was spent.
    assert _value(samples, "fleetchat_gateway_goodput_total", tier="free", pool="mini", met="false") == 1
    assert _value(samples, "fleetchat_gateway_spend_usd_total", tier="free", pool="mini") == 0
    one = tables().pools["flagship"].price.cost_usd(PROMPT_TOKENS, PIECES)
    spent = _value(samples, "fleetchat_gateway_spend_usd_total", **plus)
    assert spent == pytest.approx((streams + 1) * one)
    assert _value(samples, "fleetchat_gateway_spend_usd_total", tier="eval", pool="flagship") == pytest.approx(
        streams * one
    )


def test_a_stream_that_fails_mid_way_misses_the_slo(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "fleetchat.db")
    _, key = _tenant(store, "plus", Tier.PLUS)
    with serve(stand_in_worker("w", truncate=True)) as worker:
        urls = {"mini": [worker], "flagship": [worker]}
        settings = Settings(data_dir=tmp_path, worker_urls=urls, pools=list(urls))
        with serve(create_app(settings, store=store)) as url:
            api = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
            with pytest.raises(openai.APIError, match="stopped before finishing"):
                list(api.chat.completions.create(model="flagship", messages=HI, stream=True))
            samples = _settled(url, "fleetchat_gateway_requests_total", 1, model="flagship", status="200")
    failed = {"tier": "plus", "pool": "flagship"}
    assert _value(samples, "fleetchat_gateway_goodput_total", met="false", **failed) == 1
    assert _value(samples, "fleetchat_gateway_goodput_total", met="true", **failed) == 0
    assert _value(samples, "fleetchat_gateway_ttft_seconds_count", **failed) == 1  # its first chunk did arrive
    assert _value(samples, "fleetchat_gateway_e2e_seconds_count", **failed) == 0  # not an answer
    # The stream started with 200: that is its status, in both counters.
    assert _value(samples, "fleetchat_gateway_requests_total", model="flagship", status="200") == 1

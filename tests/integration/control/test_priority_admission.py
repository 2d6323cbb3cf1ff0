"""Priority admission, overflow and brownout through a real gateway on loopback, in front of workers that answer only
when the test opens their valve (tests/support/stand_ins/held_worker.py): a pool is busy exactly as long as the test
says.

Nothing here is timed: the tests wait (with generous deadlines) for states the gateway reports on /metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx
import openai
import pytest

from functions.accounts.operations import create_tenant_with_key, mint_admin_key
from functions.control.admission import estimate_prompt_tokens
from shared.fleet.tables import limits_for
from shared.fleet.tiers import Tier
from shared.storage.sqlite.accounts import SQLiteStore
from shared.wire.schemas import ChatMessage
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.processes import free_port
from tests.support.prom import labelled, sample
from tests.support.servers import serve
from tests.support.stand_ins.held_worker import held_worker
from tests.support.stand_ins.scripted_worker import scripted_worker

DEADLINE_S = 30.0
MAX_TOKENS = 16


def keys(gw: Gateway, *tiers: Tier) -> list[str]:
    store = SQLiteStore(gw.data_dir / "fleetchat.db")
    try:
        return [create_tenant_with_key(store, f"{tier.value}-{i}", tier, "k")[1].key for i, tier in enumerate(tiers)]
    finally:
        store.close()


def admin_key(gw: Gateway) -> str:
    store = SQLiteStore(gw.data_dir / "fleetchat.db")
    try:
        return mint_admin_key(store, "tests").key
    finally:
        store.close()


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {DEADLINE_S:.0f} s: {what}")
        time.sleep(0.02)


def body(model: str, text: str, stream: bool = True) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}], "stream": stream, "max_tokens": MAX_TOKENS}


async def send(http: httpx.AsyncClient, gw: Gateway, key: str, model: str, text: str) -> httpx.Response:
    """One streamed chat request, read to its end."""
    async with http.stream(
        "POST", f"{gw.url}/v1/chat/completions", json=body(model, text), headers=gw.headers(key)
    ) as r:
        await r.aread()
        return r


async def until(check: Callable[[], bool], what: str) -> None:
    await asyncio.to_thread(wait_until, check, what)


def depth(gw: Gateway, pool: str) -> float:
    return labelled(gw.url, "fleetchat_gateway_queue_depth", pool=pool)


def in_flight(gw: Gateway, pool: str) -> float:
    return labelled(gw.url, "fleetchat_gateway_pool_in_flight", pool=pool)


async def test_paid_requests_overtake_a_saturating_free_load_and_free_is_refused_when_its_queue_is_full(
    gateway_for: GatewayFactory,
) -> None:
    mini, flagship = held_worker("mini"), held_worker("flagship")
    with serve(mini) as mini_url, serve(flagship) as flagship_url:
        gw = gateway_for(
            {"mini": [mini_url], "flagship": [flagship_url]},
            pool={"capacity": {"mini": 1, "flagship": 1}},
            queue={"max_waiting": {"free": 3}},
        )
        free_a, free_b, enterprise, plus = keys(gw, Tier.FREE, Tier.FREE, Tier.ENTERPRISE, Tier.PLUS)
        async with httpx.AsyncClient(timeout=60) as http:
            sent = [asyncio.create_task(send(http, gw, free_a, "mini", "free-1"))]
            await until(lambda: in_flight(gw, "mini") == 1, "the first free request runs")
            for n, (key, text) in enumerate(((free_a, "free-a2"), (free_a, "free-a3"), (free_b, "free-b1")), 1):
                sent.append(asyncio.create_task(send(http, gw, key, "mini", text)))
                await until(lambda n=n: depth(gw, "mini") == n, f"{n} free requests wait")

            # The free queue is full: the next free request is refused at once, the way OpenAI clients retry.
            api = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=free_b, max_retries=0)
            with pytest.raises(openai.APIStatusError) as refused:
                api.chat.completions.create(model="mini", messages=[{"role": "user", "content": "free-4"}])
            assert refused.value.status_code == 503
            assert refused.value.body["code"] == "capacity_exceeded"  # type: ignore[index]
            assert 1 <= int(refused.value.response.headers["retry-after"]) <= 60

            sent += [asyncio.create_task(send(http, gw, plus, "mini", "plus-1"))]
            await until(lambda: depth(gw, "mini") == 4, "plus waits too")
            sent += [asyncio.create_task(send(http, gw, enterprise, "mini", "enterprise-1"))]
            await until(lambda: depth(gw, "mini") == 5, "enterprise waits too (its own tier's queue)")
            mini.state.valve.open()
            responses = await asyncio.gather(*sent)
        assert [r.status_code for r in responses] == [200] * 6
        assert all(r.text.rstrip().endswith("data: [DONE]") for r in responses)
        # Paid first; then the free tenants take turns (a had a turn, so b's request overtakes a's second).
        assert mini.state.arrivals == ["free-1", "enterprise-1", "plus-1", "free-a2", "free-b1", "free-a3"]
        assert mini.state.peak == 1, "the pool never ran more than its capacity"
        assert labelled(gw.url, "fleetchat_gateway_admission_refused_total", tier="free", reason="queue_full") == 1
        assert sample(gw.url, "fleetchat_gateway_queue_wait_seconds_count") == 6
        assert depth(gw, "mini") == 0 and in_flight(gw, "mini") == 0


async def test_a_queued_client_that_disconnects_leaves_no_reservation_behind(gateway_for: GatewayFactory) -> None:
    mini = held_worker("mini")
    with serve(mini) as mini_url:
        # A wait bound far beyond the test: only the disconnect can take the leaver out of the queue.
        gw = gateway_for(
            {"mini": [mini_url], "flagship": [mini_url]},
            pool={"capacity": {"mini": 1}},
            queue={"max_wait_s": {"free": 600}},
        )
        busy, leaver = keys(gw, Tier.FREE, Tier.FREE)
        async with httpx.AsyncClient(timeout=60) as http:
            running = asyncio.create_task(send(http, gw, busy, "mini", "running"))
            await until(lambda: in_flight(gw, "mini") == 1, "one request holds the pool")
            gone = asyncio.create_task(send(http, gw, leaver, "mini", "leaves"))
            await until(lambda: depth(gw, "mini") == 1, "the leaver waits")
            gone.cancel()  # the client closes its connection while queued
            await until(lambda: depth(gw, "mini") == 0, "the leaver left the queue")
            mini.state.valve.open()
            assert (await running).status_code == 200
        assert mini.state.arrivals == ["running"], "a request whose client left never reaches the worker"
        assert sample(gw.url, "fleetchat_gateway_admission_refused_total") == 0
        # Its reservation was settled to nothing, and its message does not count against the free cap.
        after = httpx.post(
            f"{gw.url}/v1/chat/completions", json=body("mini", "next", stream=False), headers=gw.headers(leaver)
        )
        assert after.status_code == 200
        free = limits_for(Tier.FREE)
        reserved = estimate_prompt_tokens([ChatMessage(role="user", content="next")]) + MAX_TOKENS
        assert int(after.headers["x-ratelimit-remaining-tokens"]) == free.key_tpm - reserved
        assert int(after.headers["x-ratelimit-remaining-messages"]) == (free.message_cap or 0) - 1
        assert in_flight(gw, "mini") == 0


async def test_plus_overflows_to_mini_with_the_banner_then_is_refused(gateway_for: GatewayFactory) -> None:
    mini, flagship = held_worker("mini"), held_worker("flagship")
    with serve(mini) as mini_url, serve(flagship) as flagship_url:
        gw = gateway_for(
            {"mini": [mini_url], "flagship": [flagship_url]},
            pool={"capacity": {"mini": 1, "flagship": 1}},
            queue={"max_waiting": {"plus": 0}},  # flagship cannot take a plus request in time once it is busy
        )
        (plus,) = keys(gw, Tier.PLUS)
        async with httpx.AsyncClient(timeout=60) as http:
            first = asyncio.create_task(send(http, gw, plus, "flagship", "first"))
            await until(lambda: in_flight(gw, "flagship") == 1, "flagship is busy")
            second = asyncio.create_task(send(http, gw, plus, "flagship", "second"))
            await until(lambda: in_flight(gw, "mini") == 1, "the overflow runs on mini")
            api = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=plus, max_retries=0)
            with pytest.raises(openai.APIStatusError) as refused:
                api.chat.completions.create(model="flagship", messages=[{"role": "user", "content": "third"}])
            assert refused.value.status_code == 503 and "retry-after" in refused.value.response.headers
            assert refused.value.body["code"] == "capacity_exceeded"  # type: ignore[index]
            mini.state.valve.open()
            flagship.state.valve.open()
            overflowed, direct = await second, await first
        assert overflowed.status_code == 200 and overflowed.headers["x-fleetchat-fallback-model"] == "mini"
        assert '"model": "mini"' in overflowed.text or '"model":"mini"' in overflowed.text
        assert "x-fleetchat-fallback-model" not in direct.headers
        assert mini.state.arrivals == ["second"] and flagship.state.arrivals == ["first"]
        downgrades = labelled(
            gw.url, "fleetchat_gateway_downgrades_total", tier="plus", from_pool="flagship", reason="overload"
        )
        assert downgrades == 1


async def test_brownout_switches_on_under_load_and_off_after_it(gateway_for: GatewayFactory) -> None:
    mini = held_worker("mini")
    with serve(mini) as mini_url:
        gw = gateway_for(
            {"mini": [mini_url], "flagship": [mini_url]},
            pool={"capacity": {"mini": 1}},
            brownout={
                "queue_depth": {"mini": 1},
                "window_s": 0.5,
                "hold_s": 0.2,
                "tick_s": 0.05,
            },  # one waiting request is overload here
        )
        busy, waiting, late = keys(gw, Tier.FREE, Tier.FREE, Tier.FREE)
        assert sample(gw.url, "fleetchat_gateway_brownout_active") == 0
        unasked = {"model": "mini", "messages": [{"role": "user", "content": "late"}], "stream": True}
        async with httpx.AsyncClient(timeout=60) as http:
            first = asyncio.create_task(send(http, gw, busy, "mini", "first"))
            await until(lambda: in_flight(gw, "mini") == 1, "the pool is busy")
            queued = asyncio.create_task(send(http, gw, waiting, "mini", "queued"))
            await until(lambda: sample(gw.url, "fleetchat_gateway_brownout_active") == 1, "brownout on")
            # Admitted while the pool is in brownout, without a max_tokens of its own: the tier's brownout budget.
            capped = asyncio.create_task(
                http.post(f"{gw.url}/v1/chat/completions", json=unasked, headers=gw.headers(late))
            )
            await until(lambda: depth(gw, "mini") == 2, "the late request waits too")
            mini.state.valve.open()
            await asyncio.gather(first, queued)
            answered = await capped
        assert answered.status_code == 200 and answered.headers["x-fleetchat-brownout"] == "true"
        await until(lambda: sample(gw.url, "fleetchat_gateway_brownout_active") == 0, "brownout off after the load")
        assert labelled(gw.url, "fleetchat_gateway_brownout_transitions_total", to="on") == 1
        assert labelled(gw.url, "fleetchat_gateway_brownout_transitions_total", to="off") == 1


async def test_the_admin_override_forces_brownout_and_auto_gives_it_back(gateway_for: GatewayFactory) -> None:
    mini = held_worker("mini")
    mini.state.valve.open()
    with serve(mini) as mini_url:
        gw = gateway_for({"mini": [mini_url], "flagship": [mini_url]})
        (free,) = keys(gw, Tier.FREE)
        admin = {"authorization": f"Bearer {admin_key(gw)}"}
        forced = httpx.put(f"{gw.url}/admin/v1/brownout", json={"mode": "on"}, headers=admin)
        assert forced.json() == {"mode": "on", "active": True, "pools": {"mini": True, "flagship": True}}
        capped = httpx.post(f"{gw.url}/v1/chat/completions", json=body("mini", "hi", False), headers=gw.headers(free))
        assert capped.headers.get("x-fleetchat-brownout") is None  # asked for 16 tokens: below the cap, not capped
        unasked = {"model": "mini", "messages": [{"role": "user", "content": "hi"}]}
        capped = httpx.post(f"{gw.url}/v1/chat/completions", json=unasked, headers=gw.headers(free))
        assert capped.headers["x-fleetchat-brownout"] == "true"
        assert httpx.put(f"{gw.url}/admin/v1/brownout", json={"mode": "auto"}, headers=admin).json()["active"] is False
        assert httpx.put(f"{gw.url}/admin/v1/brownout", json={"active": True}, headers=admin).json()["mode"] == "on"
        bad = httpx.put(f"{gw.url}/admin/v1/brownout", json={"mode": "sometimes"}, headers=admin)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "mode"
        assert httpx.get(f"{gw.url}/admin/v1/brownout", headers=admin).json()["mode"] == "on"
        refused = httpx.put(f"{gw.url}/admin/v1/brownout", json={"mode": "off"}, headers=gw.headers(free))
        assert refused.status_code in (401, 403)


async def test_unreachable_fallbacks_are_counted_and_no_way_out_keeps_a_place(gateway_for: GatewayFactory) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with serve(scripted_worker("Fine, thanks.")) as mini:
        gw = gateway_for({"flagship": [dead], "mini": [mini]})
        for stream in (False, True):
            answered = httpx.post(
                f"{gw.url}/v1/chat/completions", json=body("flagship", "hi", stream), headers=gw.headers()
            )
            assert answered.status_code == 200 and answered.headers["x-fleetchat-fallback-model"] == "mini"
        direct = httpx.post(f"{gw.url}/v1/chat/completions", json=body("mini", "hi", False), headers=gw.headers())
        assert direct.status_code == 200 and "x-fleetchat-fallback-model" not in direct.headers
        downgrades = labelled(gw.url, "fleetchat_gateway_downgrades_total", from_pool="flagship", reason="unreachable")
        assert downgrades == 2
        # Answered directly or failed over, streamed or not: every place was given back.
        assert in_flight(gw, "flagship") == 0 and in_flight(gw, "mini") == 0
    with serve(scripted_worker("Fine, thanks.")) as flagship:
        gw = gateway_for({"flagship": [flagship], "mini": [dead]})
        failed = httpx.post(f"{gw.url}/v1/chat/completions", json=body("mini", "hi", True), headers=gw.headers())
        assert failed.status_code == 503 and failed.json()["error"]["code"] == "service_unavailable"
        assert in_flight(gw, "mini") == 0, "a request that failed gave its place back"

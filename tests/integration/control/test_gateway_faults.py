"""Gateway behaviour when workers misbehave, against stand-in workers on real loopback HTTP (no model needed)."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.support.processes import free_port
from tests.support.servers import serve
from tests.support.stand_ins.stand_in import stand_in_worker


def test_worker_dying_mid_stream_ends_with_an_error_event(gateway_for) -> None:
    with serve(stand_in_worker("w", truncate=True)) as worker:
        gw = gateway_for({"mini": [worker], "flagship": [worker]})
        url, key = gw.url, gw.key
        raw = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "mini", "messages": [{"role": "user", "content": "hi"}], "stream": True},
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
        )
        # Each event's first line is its `id:` (resumable streams); the rest is the event.
        events = [e.split("\n", 1)[1] for e in raw.text.split("\n\n") if e.strip()]
        assert events[0].startswith("data: {")
        assert events[-2].startswith("event: error\ndata: ")
        assert events[-1] == "data: [DONE]"
        api = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
        stream = api.chat.completions.create(model="mini", messages=[{"role": "user", "content": "hi"}], stream=True)
        with pytest.raises(openai.APIError, match="stopped before finishing"):
            list(stream)


def test_unreachable_replica_fails_over_to_the_next(gateway_for) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with serve(stand_in_worker("alive")) as alive:
        gw = gateway_for({"mini": [dead, alive], "flagship": [alive]})
        url, key = gw.url, gw.key
        api = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
        for session in ("a", "b", "c", "d"):
            reply = api.chat.completions.create(
                model="mini", messages=[{"role": "user", "content": "hi"}], extra_headers={"x-session-id": session}
            )
            assert reply.choices[0].message.content == "alive"


def test_no_worker_at_all_is_503_with_retry_after(gateway_for) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    gw = gateway_for({"mini": [dead], "flagship": [dead]})
    url, key = gw.url, gw.key
    response = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "mini", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert response.status_code == 503
    assert 1 <= int(response.headers["retry-after"]) <= 60
    assert response.json()["error"]["code"] == "service_unavailable"
    assert httpx.get(f"{url}/healthz", timeout=10).status_code == 503  # not ready: no replica to send traffic to
    live = httpx.get(f"{url}/health", timeout=10)  # but live: restarting the gateway would not help
    assert live.status_code == 200 and live.json() == {"status": "ok"}


def test_worker_error_is_final_not_retried_and_maps_to_502(gateway_for) -> None:
    broken, other = stand_in_worker("broken", status=500), stand_in_worker("other")
    with serve(broken) as first, serve(other) as second:
        gw = gateway_for({"mini": [first, second], "flagship": [second]})
        url, key = gw.url, gw.key
        # Without a session id replicas rotate, so two requests reach both; the broken one's answer is final.
        statuses = sorted(
            httpx.post(
                f"{url}/v1/chat/completions",
                json={"model": "mini", "messages": [{"role": "user", "content": "hi"}]},
                headers={"authorization": f"Bearer {key}"},
                timeout=30,
            ).status_code
            for _ in range(2)
        )
        assert statuses == [200, 502]
        assert broken.state.calls == 1 and other.state.calls == 1, "a 5xx answer must not be replayed elsewhere"


# The completions path and vLLM's tokenizer endpoints, on the same worker faults as chat.
ROUTES = [
    ("POST", "/v1/completions", {"model": "mini", "prompt": "hi", "max_tokens": 2}),
    ("POST", "/v1/responses", {"model": "mini", "input": "hi", "max_output_tokens": 2, "store": False}),
    ("POST", "/tokenize", {"prompt": "hi"}),
    ("POST", "/detokenize", {"tokens": [1, 2]}),
    ("GET", "/tokenizer_info", None),
]


def test_completions_and_the_tokenizer_routes_are_503_without_a_worker(gateway_for) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    gw = gateway_for({"mini": [dead], "flagship": [dead]})
    for method, path, body in ROUTES:
        response = httpx.request(
            method, f"{gw.url}{path}", json=body, headers={"authorization": f"Bearer {gw.key}"}, timeout=30
        )
        assert response.status_code == 503, (path, response.text)
        assert response.json()["error"]["code"] == "service_unavailable"


def test_completions_and_the_tokenizer_routes_map_a_worker_error_to_502(gateway_for) -> None:
    broken = stand_in_worker("broken", status=500)
    with serve(broken) as url:
        gw = gateway_for({"mini": [url], "flagship": [url]})
        for method, path, body in ROUTES:
            response = httpx.request(
                method, f"{gw.url}{path}", json=body, headers={"authorization": f"Bearer {gw.key}"}, timeout=30
            )
            assert response.status_code == 502, (path, response.text)

"""Accounts, keys, sessions, the ledger and /v1/usage against the real stack (SmolLM2 workers + gateway process)."""

from __future__ import annotations

import sqlite3
import time

import httpx
import openai
import pytest

from shared.fleet.tiers import Tier
from tests.conftest import Stack
from tests.support.stack_reads import client, ledger

ADMIN = "/admin/v1"
CSRF = {"x-requested-with": "fleetchat"}
# A real model's answer through the shared stack: the web chat's browser sets no deadline of its own, and on these
# 2 shared cores llama.cpp's spinning barrier stalls a step for seconds while another process holds a core
# (gpu_workers/llama_cpp/core_share.py), so httpx's 5 s default is no bound for it. Connecting and sending stay at 5 s.
MODEL_ANSWER_TIMEOUT = httpx.Timeout(5.0, read=60.0)


def _api(stack: Stack, key: str) -> openai.OpenAI:
    return client(stack, key)


def _ledger_rows(stack: Stack, tenant_id: str) -> list[sqlite3.Row]:
    return ledger(stack, tenant_id)


def _usage(stack: Stack, key: str, **params: str) -> dict:
    response = httpx.get(f"{stack.gateway_url}/v1/usage", params=params, headers={"authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text
    return response.json()


def test_every_answer_lands_in_the_ledger_with_the_workers_usage(stack: Stack) -> None:
    tenant_id, key = stack.new_tenant(Tier.PLUS, "ledger")
    api = _api(stack, key)
    plain = api.chat.completions.with_raw_response.create(
        model="mini", messages=[{"role": "user", "content": "Say hi."}], max_tokens=12
    )
    completion = plain.parse()
    stream = api.chat.completions.create(
        model="mini",
        messages=[{"role": "user", "content": "Count to five."}],
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    streamed_usage = chunks[-1].usage
    assert streamed_usage is not None
    assert all(c.usage is None for c in chunks[:-1])  # per-chunk usage from the worker is not passed on
    rows = _ledger_rows(stack, tenant_id)
    assert rows[0]["request_id"] == plain.headers["x-request-id"]
    assert [(r["model"], r["outcome"]) for r in rows] == [("mini", "completed"), ("mini", "completed")]
    assert (rows[0]["prompt_tokens"], rows[0]["completion_tokens"]) == (
        completion.usage.prompt_tokens,
        completion.usage.completion_tokens,
    )
    assert (rows[1]["prompt_tokens"], rows[1]["completion_tokens"]) == (
        streamed_usage.prompt_tokens,
        streamed_usage.completion_tokens,
    )
    report = _usage(stack, key)
    assert report["totals"]["requests"] == 2
    assert (
        report["totals"]["completion_tokens"] == completion.usage.completion_tokens + streamed_usage.completion_tokens
    )
    assert report["by_model"]["mini"]["prompt_tokens"] == completion.usage.prompt_tokens + streamed_usage.prompt_tokens
    assert [d["model"] for d in report["data"]] == ["mini"]


def test_a_stream_the_client_abandons_is_billed_for_what_was_generated(stack: Stack) -> None:
    tenant_id, key = stack.new_tenant(Tier.PLUS, "aborter")
    body = {"model": "mini", "messages": [{"role": "user", "content": "Write a long story."}], "stream": True,
            "max_tokens": 400, "temperature": 0.8}  # fmt: skip
    with httpx.stream(
        "POST", f"{stack.gateway_url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
    ) as response:
        request_id = response.headers["x-request-id"]
        received = 0
        for line in response.iter_lines():
            received += line.startswith("data: {")
            if received >= 6:
                break  # the client goes away mid-answer (not resumable: the answer stops with it)
    deadline = time.monotonic() + 10
    while not (rows := _ledger_rows(stack, tenant_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    [row] = rows
    assert row["request_id"] == request_id and row["outcome"] == "aborted"
    assert row["prompt_tokens"] > 0
    assert 4 <= row["completion_tokens"] < 400


def test_usage_range_and_bad_ranges(stack: Stack) -> None:
    _, key = stack.new_tenant(Tier.PLUS, "ranges")
    empty = _usage(stack, key, start="2020-01-01", end="2020-02-01")
    assert empty["data"] == [] and empty["totals"]["requests"] == 0
    headers = {"authorization": f"Bearer {key}"}
    for params, param in (({"start": "yesterday"}, "start"), ({"start": "2026-02-01", "end": "2026-01-01"}, "end"),
                          ({"start": "2020-01-01", "end": "2026-01-01"}, "start")):  # fmt: skip
        response = httpx.get(f"{stack.gateway_url}/v1/usage", params=params, headers=headers)
        assert response.status_code == 400 and response.json()["error"]["param"] == param
    assert httpx.get(f"{stack.gateway_url}/v1/usage").status_code == 401


def test_admin_api_creates_lists_and_revokes_keys(stack: Stack, plus_key: str) -> None:
    admin = {"authorization": f"Bearer {stack.admin_key()}"}
    url = stack.gateway_url + ADMIN
    assert httpx.get(f"{url}/tenants").status_code == 401
    assert httpx.get(f"{url}/tenants", headers={"authorization": f"Bearer {plus_key}"}).status_code == 401
    created = httpx.post(f"{url}/tenants", json={"name": "acme", "tier": "free", "key_label": "first"}, headers=admin)
    assert created.status_code == 201, created.text
    tenant, first = created.json()["tenant"], created.json()["api_key"]
    assert tenant["limits"]["message_cap"] == 40 and first["key"].startswith("fc-")
    tenant_id = tenant["id"]
    user = httpx.post(f"{url}/tenants/{tenant_id}/users", json={"email": "ada@example.com"}, headers=admin).json()
    second = httpx.post(
        f"{url}/tenants/{tenant_id}/keys", json={"label": "laptop", "user_id": user["id"]}, headers=admin
    ).json()
    listed = httpx.get(f"{url}/tenants/{tenant_id}/keys", headers=admin).json()["data"]
    assert [k["label"] for k in listed] == ["first", "laptop"]
    assert all("key" not in k and k["hint"].startswith("fc-") for k in listed)  # never shown again
    assert _api(stack, second["key"]).models.list().data  # the new key works at once

    upgraded = httpx.patch(
        f"{url}/tenants/{tenant_id}", json={"tier": "plus", "limits": {"key_rpm": 7}}, headers=admin
    ).json()
    assert upgraded["tier"] == "plus" and upgraded["limits"]["key_rpm"] == 7
    response = _api(stack, second["key"]).chat.completions.with_raw_response.create(
        model="flagship", messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert response.headers["x-ratelimit-limit-requests"] == "7"  # the change holds on the next request

    revoked = httpx.delete(f"{url}/tenants/{tenant_id}/keys/{second['id']}", headers=admin)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    with pytest.raises(openai.AuthenticationError):
        _api(stack, second["key"]).models.list()  # revoked: fails at once
    assert _api(stack, first["key"]).models.list().data  # the tenant's other key still works


def test_admin_api_bad_input_is_refused_and_changes_nothing(stack: Stack) -> None:
    admin = {"authorization": f"Bearer {stack.admin_key()}"}
    url = stack.gateway_url + ADMIN
    tenant_id = httpx.post(f"{url}/tenants", json={"name": "x", "tier": "plus"}, headers=admin).json()["tenant"]["id"]
    cases = [
        ("post", "/tenants", {"name": "", "tier": "plus"}),
        ("post", "/tenants", {"name": "y", "tier": "platinum"}),
        ("post", "/tenants", {"name": "y", "tier": "plus", "purpose": "internal"}),
        ("patch", f"/tenants/{tenant_id}", {"tier": None}),
        ("patch", f"/tenants/{tenant_id}", {"limits": {"key_rpm": 0}}),
        ("patch", f"/tenants/{tenant_id}", {"stripe_customer_id": "not-a-customer"}),
        ("patch", f"/tenants/{tenant_id}", {"surprise": 1}),
        ("patch", f"/tenants/{tenant_id}", {"purpose": "eval"}),  # fixed at creation: billing history stays true
        ("post", f"/tenants/{tenant_id}/users", {"email": "no-at-sign"}),
        ("post", f"/tenants/{tenant_id}/keys", {"label": "k", "user_id": "usr_missing"}),
    ]
    for method, path, body in cases:
        response = httpx.request(method, url + path, json=body, headers=admin)
        assert response.status_code in (400, 404), (path, body, response.text)
        assert response.json()["error"]["message"]
    after = httpx.get(f"{url}/tenants/{tenant_id}", headers=admin).json()
    assert (after["tier"], after["overrides"], after["stripe_customer_id"]) == ("plus", None, None)
    assert after["purpose"] == "customer"
    names = [t["name"] for t in httpx.get(f"{url}/tenants", headers=admin).json()["data"]]
    assert "y" not in names
    assert httpx.get(f"{url}/tenants/{tenant_id}/keys", headers=admin).json()["data"] == []
    assert httpx.get(f"{url}/tenants/ten_{'0' * 32}", headers=admin).status_code == 404


def test_web_session_cookie(stack: Stack) -> None:
    tenant_id, key = stack.new_tenant(Tier.PLUS, "browser")
    with httpx.Client(base_url=stack.gateway_url) as browser:
        assert browser.post("/v1/session", json={"api_key": key}).status_code == 403  # no CSRF header
        assert browser.post("/v1/session", json={"api_key": "fc-wrong"}, headers=CSRF).status_code == 401
        signed_in = browser.post("/v1/session", json={"api_key": key}, headers=CSRF)
        assert signed_in.status_code == 200 and signed_in.json()["tenant"]["id"] == tenant_id
        cookie = signed_in.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/" in cookie
        assert "Secure" not in cookie  # plain http on loopback; any other host gets Secure
        assert key not in cookie
        assert browser.get("/v1/session").json()["key"]["hint"] == key[:7] + "…"
        assert browser.get("/v1/conversations").status_code == 200
        chat = {"model": "mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        assert browser.post("/v1/chat/completions", json=chat).status_code == 403  # state change needs the header
        try:  # the session layer answers within httpx's 5 s default; a model's answer gets a model's deadline
            answered = browser.post("/v1/chat/completions", json=chat, headers=CSRF, timeout=MODEL_ANSWER_TIMEOUT)
        except httpx.TimeoutException as exc:
            raise AssertionError(f"no answer within {MODEL_ANSWER_TIMEOUT.read} s: {stack.load()}") from exc
        assert answered.status_code == 200
        browser.cookies.set("fleetchat_session", browser.cookies["fleetchat_session"][:-2] + "xx")
        assert browser.get("/v1/session").status_code == 401  # tampered
    with httpx.Client(base_url=stack.gateway_url) as browser:
        browser.post("/v1/session", json={"api_key": key}, headers=CSRF)
        admin = {"authorization": f"Bearer {stack.admin_key()}"}
        [record] = httpx.get(f"{stack.gateway_url}{ADMIN}/tenants/{tenant_id}/keys", headers=admin).json()["data"]
        httpx.delete(f"{stack.gateway_url}{ADMIN}/tenants/{tenant_id}/keys/{record['id']}", headers=admin)
        assert browser.get("/v1/session").status_code == 401  # revoking the key ends its sessions
        out = browser.delete("/v1/session")
        assert out.status_code == 204 and "fleetchat_session=" in out.headers["set-cookie"]

"""What the web chat needs from the API, over real HTTP with the openai SDK: edit-and-resend and regenerate
replace the stored history after a message; a stopped stream keeps its partial answer marked "stopped"; a pool with
no reachable replica falls back to the tier's next pool and says so; the page and the API carry the security
headers."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from functions.api.web_ui import CONTENT_SECURITY_POLICY
from functions.app import create_app
from functions.chat.pipeline import FALLBACK_HEADER
from shared.settings import Settings
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.processes import free_port
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import scripted_worker

SCRIPT = "Lisbon in three days: Alfama on day one, Belém on day two, and Sintra on the third. " * 3


def _client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.key, max_retries=0)


def _conversation(gateway: Gateway, conversation_id: str) -> dict:
    response = httpx.get(f"{gateway.url}/v1/conversations/{conversation_id}", headers=gateway.headers())
    response.raise_for_status()
    return response.json()


def _say(client: openai.OpenAI, text: str, **extra: object) -> dict:
    completion = client.chat.completions.create(
        model="mini", messages=[{"role": "user", "content": text}], extra_body=extra
    )
    return completion.model_extra["conversation"]


@pytest.fixture
def scripted(gateway_for: GatewayFactory) -> Iterator[tuple[Gateway, object]]:
    worker = scripted_worker(SCRIPT, delay_s=0.02)
    with serve(worker) as url:
        yield gateway_for({"mini": [url]}), worker


def test_edit_and_regenerate_keep_every_version_as_a_branch(scripted: tuple[Gateway, object]) -> None:
    gateway, _ = scripted
    client = _client(gateway)
    conversation_id = _say(client, "Plan a trip to Lisbon", store=True)["id"]
    _say(client, "Three days only", conversation_id=conversation_id)
    assert _conversation(gateway, conversation_id)["message_count"] == 4

    # Regenerate the last answer: replace from the last user message (id 2) with the same text: a second answer.
    regenerated = _say(client, "Three days only", conversation_id=conversation_id, replace_from=2)
    assert regenerated["stored"] is True and regenerated["message_ids"] == [4]
    stored = _conversation(gateway, conversation_id)
    assert [m["content"] for m in stored["messages"]] == ["Plan a trip to Lisbon", SCRIPT, "Three days only", SCRIPT]
    assert [m["id"] for m in stored["messages"]] == [0, 1, 2, 4] and stored["messages"][3]["sibling_ids"] == [3, 4]
    assert [m["id"] for m in stored["branches"]] == [3]
    assert (stored["message_count"], stored["version"], stored["current_node"]) == (5, 3, 4)

    # Edit the first message and resend: a second version of it, with its own answer; nothing is removed.
    edited = _say(client, "Plan a trip to Porto", conversation_id=conversation_id, replace_from=0)
    assert edited["message_ids"] == [5, 6]
    stored = _conversation(gateway, conversation_id)
    assert [(m["role"], m["content"], m["id"], m["parent_id"]) for m in stored["messages"]] == [
        ("user", "Plan a trip to Porto", 5, None),
        ("assistant", SCRIPT, 6, 5),
    ]
    assert stored["messages"][0]["sibling_ids"] == [0, 5] and stored["messages"][1]["finish_reason"] == "stop"
    assert [m["id"] for m in stored["branches"]] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("replace_from", "with_conversation"),
    [(1, True), (2, True), (99, True), (0, False)],
    ids=["assistant-message", "past-the-end", "far-past-the-end", "no-conversation"],
)
def test_a_bad_edit_is_a_400_and_changes_nothing(
    scripted: tuple[Gateway, object], replace_from: int, with_conversation: bool
) -> None:
    gateway, worker = scripted
    client = _client(gateway)
    conversation_id = _say(client, "Plan a trip to Lisbon", store=True)["id"]
    calls = worker.state.calls
    before = _conversation(gateway, conversation_id)
    extra: dict[str, object] = {"replace_from": replace_from}
    if with_conversation:
        extra["conversation_id"] = conversation_id
    with pytest.raises(openai.BadRequestError) as refused:
        _say(client, "edited", **extra)
    assert refused.value.body["param"] in ("replace_from", None) or "replace_from" in str(refused.value)
    assert worker.state.calls == calls
    assert _conversation(gateway, conversation_id) == before


def test_a_stopped_stream_keeps_its_partial_answer_marked_stopped(scripted: tuple[Gateway, object]) -> None:
    gateway, worker = scripted
    client = _client(gateway)
    conversation_id = _say(client, "Plan a trip to Lisbon", store=True)["id"]
    stream = client.chat.completions.create(
        model="mini",
        messages=[{"role": "user", "content": "Three days only"}],
        stream=True,
        extra_body={"conversation_id": conversation_id},
    )
    received = ""
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            received += chunk.choices[0].delta.content
        if len(received) >= 20:
            break
    # What the web chat's Stop does: cancel the answer (a dropped connection alone keeps generating for a while, to be
    # resumed), then close the connection.
    httpx.post(f"{gateway.url}/v1/chat/completions/{chunk.id}/cancel", headers=gateway.headers()).raise_for_status()
    stream.close()
    deadline = time.monotonic() + 10
    while (stored := _conversation(gateway, conversation_id))["message_count"] < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    answer = stored["messages"][-1]
    assert answer["role"] == "assistant" and answer["finish_reason"] == "stopped"
    assert answer["model"] == "mini"  # who answered is kept with a stopped answer too
    assert answer["content"].startswith(received) and 0 < len(answer["content"]) < len(SCRIPT)
    assert worker.state.streams[-1]["finished"] is False  # the worker's generation was cut off, not run to the end
    # The stopped answer is history like any other: the next turn continues after it.
    _say(client, "And a day trip?", conversation_id=conversation_id)
    assert _conversation(gateway, conversation_id)["message_count"] == 6


def test_an_unreachable_pool_falls_back_to_the_tiers_next_pool_and_says_so(gateway_for: GatewayFactory) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with serve(scripted_worker(SCRIPT)) as mini:
        gateway = gateway_for({"flagship": [dead], "mini": [mini]})
        for stream in (False, True):
            response = httpx.post(
                f"{gateway.url}/v1/chat/completions",
                headers=gateway.headers(),
                json={
                    "model": "flagship",
                    "messages": [{"role": "user", "content": "hi"}],
                    "stream": stream,
                    "store": True,
                },
                timeout=30,
            )
            assert response.status_code == 200, response.text
            assert response.headers[FALLBACK_HEADER] == "mini"
            # The stored answer says which model answered it: the fallback pool, not the one asked for.
            answer = _conversation(gateway, response.headers["x-conversation-id"])["messages"][-1]
            assert (answer["role"], answer["model"], stream) == ("assistant", "mini", stream)
        with sqlite3.connect(gateway.data_dir / "fleetchat.db") as db:
            models = {row[0] for row in db.execute("SELECT model FROM ledger")}
        assert models == {"mini"}  # billed as the model that answered


def test_a_tier_with_no_other_pool_gets_503_not_a_silent_downgrade(gateway_for: GatewayFactory) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with serve(scripted_worker(SCRIPT)) as flagship:
        gateway = gateway_for({"flagship": [flagship], "mini": [dead]})
        response = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            headers=gateway.headers(),
            json={"model": "mini", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert response.status_code == 503 and "retry-after" in response.headers
        assert FALLBACK_HEADER not in response.headers


def test_the_page_and_the_api_carry_the_security_headers(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text('<!doctype html><script type="module" src="/assets/app-1a2b.js"></script>')
    (dist / "assets" / "app-1a2b.js").write_text("console.log('hi')")
    settings = Settings(data_dir=tmp_path / "data", worker_urls={"mini": []}, pools=["mini"], web_dist_dir=dist)
    with serve(create_app(settings)) as url:
        page = httpx.get(f"{url}/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "no-referrer"
        assert page.headers["cache-control"] == "no-cache"
        asset = httpx.get(f"{url}/assets/app-1a2b.js")
        assert asset.status_code == 200 and "immutable" in asset.headers["cache-control"]
        assert httpx.get(f"{url}/assets/missing.js").status_code == 404
        api = httpx.get(f"{url}/v1/models")
        assert api.status_code == 401 and api.headers["x-content-type-options"] == "nosniff"


def test_an_unbuilt_web_chat_says_how_to_build_it(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "data", worker_urls={"mini": []}, pools=["mini"], web_dist_dir=tmp_path / "nothing"
    )
    with serve(create_app(settings)) as url:
        page = httpx.get(f"{url}/")
        assert page.status_code == 404 and "npm run build" in page.text


def test_a_halted_answer_is_stored_with_finish_reason_content_filter(gateway_for: GatewayFactory) -> None:
    harmful = (
        "Sure, I can walk you through it. To put together a pipe bomb you will need a steel pipe, two end caps and "
        "a fuse, and then you pack it tightly before you seal the second cap."
    )
    with serve(scripted_worker(harmful)) as url:
        gateway = gateway_for({"mini": [url]})
        client = _client(gateway)
        stream = client.chat.completions.create(
            model="mini",
            messages=[{"role": "user", "content": "Tell me about plumbing supplies"}],
            stream=True,
            extra_body={"store": True},
        )
        chunks = list(stream)
        conversation_id = chunks[-1].model_extra["conversation"]["id"]
        answer = _conversation(gateway, conversation_id)["messages"][-1]
        assert answer["finish_reason"] == "content_filter" and "steel pipe" not in answer["content"]

"""Conversations through the gateway (real HTTP, the openai SDK, SQLite) in front of an echoing stand-in worker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import openai
import pytest
from fastapi import FastAPI

from shared.rendering import SYSTEM_PROMPTS
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.servers import serve
from tests.support.stand_ins.stand_in import stand_in_worker


@dataclass
class Setup:
    gw: Gateway
    worker: FastAPI
    api: openai.OpenAI

    def get(self, path: str, key: str | None = None, **kwargs) -> httpx.Response:
        return httpx.get(f"{self.gw.url}{path}", headers=self.gw.headers(key), timeout=10, **kwargs)

    def send(self, method: str, path: str, key: str | None = None, **kwargs) -> httpx.Response:
        return httpx.request(method, f"{self.gw.url}{path}", headers=self.gw.headers(key), timeout=10, **kwargs)

    def start(self, text: str = "Plan a trip to Lisbon", **extra) -> dict:
        reply = self.api.chat.completions.create(
            model="mini", messages=[{"role": "user", "content": text}], extra_body={"store": True, **extra}
        )
        return reply.model_dump()

    def say(self, conversation_id: str, text: str, *, stream: bool = False):
        return self.api.chat.completions.create(
            model="mini",
            messages=[{"role": "user", "content": text}],
            extra_body={"conversation_id": conversation_id},
            stream=stream,
        )


@contextmanager
def echo_setup(gateway_for: GatewayFactory) -> Iterator[Setup]:
    """A gateway (both pools) in front of one echoing stand-in worker that records what it was sent."""
    worker = stand_in_worker("w", echo=True)
    with serve(worker) as url:
        gw = gateway_for({"mini": [url], "flagship": [url]})
        yield Setup(gw, worker, openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0))


@pytest.fixture
def setup(gateway_for: GatewayFactory) -> Iterator[Setup]:
    with echo_setup(gateway_for) as ready:
        yield ready


def test_store_true_creates_a_conversation_and_says_so(setup: Setup) -> None:
    raw = setup.api.chat.completions.with_raw_response.create(
        model="mini", messages=[{"role": "user", "content": "Plan a trip to Lisbon"}], extra_body={"store": True}
    )
    reply = raw.parse().model_dump()
    conv = reply["conversation"]
    assert conv["stored"] is True and conv["history"] == "new" and conv["version"] == 1
    assert raw.headers["x-conversation-id"] == conv["id"] and raw.headers["x-fleetchat-stored"] == "true"
    # The worker saw the versioned system prompt, then the user turn; nothing gateway-only leaked to it.
    sent = setup.worker.state.bodies[-1]
    assert sent["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPTS[1]},
        {"role": "user", "content": "Plan a trip to Lisbon"},
    ]
    assert "store" not in sent and "conversation_id" not in sent
    detail = setup.get(f"/v1/conversations/{conv['id']}").json()
    assert detail["title"] == "Plan a trip to Lisbon" and detail["version"] == 1
    assert [(m["role"], m["content"], m["model"]) for m in detail["messages"]] == [
        ("user", "Plan a trip to Lisbon", None),
        ("assistant", "echo: Plan a trip to Lisbon", "mini"),  # the model that answered, kept with the answer
    ]


def test_stateless_requests_stay_stateless(setup: Setup) -> None:
    raw = setup.api.chat.completions.with_raw_response.create(
        model="mini", messages=[{"role": "user", "content": "hi"}]
    )
    assert "x-conversation-id" not in raw.headers
    assert "conversation" not in raw.parse().model_dump()
    assert setup.worker.state.bodies[-1]["messages"] == [{"role": "user", "content": "hi"}]
    assert setup.get("/v1/conversations").json()["data"] == []


def test_continuing_sends_the_stored_history_and_appends_the_turn(setup: Setup) -> None:
    conv_id = setup.start()["conversation"]["id"]
    reply = setup.say(conv_id, "Three days only").model_dump()
    assert reply["conversation"] == {
        "id": conv_id, "stored": True, "history": "loaded", "version": 2, "message_ids": [2, 3]
    }  # fmt: skip
    assert [m["content"] for m in setup.worker.state.bodies[-1]["messages"]] == [
        SYSTEM_PROMPTS[1],
        "Plan a trip to Lisbon",
        "echo: Plan a trip to Lisbon",
        "Three days only",
    ]
    # The same id in the header works too.
    via_header = setup.api.chat.completions.create(
        model="mini", messages=[{"role": "user", "content": "And food?"}], extra_headers={"x-conversation-id": conv_id}
    )
    assert via_header.model_dump()["conversation"]["version"] == 3
    assert setup.get(f"/v1/conversations/{conv_id}").json()["message_count"] == 6


def test_a_client_resending_the_whole_history_is_not_duplicated(setup: Setup) -> None:
    conv_id = setup.start()["conversation"]["id"]
    history = [
        {"role": "user", "content": "Plan a trip to Lisbon"},
        {"role": "assistant", "content": "echo: Plan a trip to Lisbon"},
        {"role": "user", "content": "Cheaper"},
    ]
    setup.api.chat.completions.create(model="mini", messages=history, extra_body={"conversation_id": conv_id})
    assert setup.get(f"/v1/conversations/{conv_id}").json()["message_count"] == 4


def test_streamed_turn_is_saved_before_done_and_the_stream_says_so(setup: Setup) -> None:
    conv_id = setup.start()["conversation"]["id"]
    chunks = list(setup.say(conv_id, "Museums?", stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: Museums?"
    closing = chunks[-1].model_dump()
    assert closing["choices"] == [] and closing["conversation"] == {
        "id": conv_id,
        "stored": True,
        "history": "loaded",
        "version": 2,
        "message_ids": [2, 3],
    }
    messages = setup.get(f"/v1/conversations/{conv_id}").json()["messages"]
    assert messages[-1] == {**messages[-1], "role": "assistant", "content": "echo: Museums?", "model": "mini"}


def test_list_pages_newest_first_and_rename_delete(setup: Setup) -> None:
    ids = [setup.start(f"topic {i}")["conversation"]["id"] for i in range(3)]
    first = setup.get("/v1/conversations", params={"limit": 2}).json()
    assert [c["id"] for c in first["data"]] == [ids[2], ids[1]] and first["has_more"] is True
    rest = setup.get("/v1/conversations", params={"limit": 2, "after": first["next_cursor"]}).json()
    assert [c["id"] for c in rest["data"]] == [ids[0]] and rest["has_more"] is False

    renamed = setup.send("PATCH", f"/v1/conversations/{ids[0]}", json={"title": "  Lisbon   trip "})
    assert renamed.status_code == 200 and renamed.json()["title"] == "Lisbon trip"
    deleted = setup.send("DELETE", f"/v1/conversations/{ids[0]}")
    assert deleted.json() == {"id": ids[0], "object": "conversation.deleted", "deleted": True}
    assert setup.get(f"/v1/conversations/{ids[0]}").status_code == 404
    assert setup.send("DELETE", f"/v1/conversations/{ids[0]}").status_code == 404
    with pytest.raises(openai.NotFoundError):
        setup.say(ids[0], "still there?")


def test_exports_in_json_and_markdown(setup: Setup) -> None:
    conv_id = setup.start("Write a haiku")["conversation"]["id"]
    as_json = setup.get(f"/v1/conversations/{conv_id}/export")
    assert as_json.headers["content-disposition"] == f'attachment; filename="{conv_id}.json"'
    assert [m["content"] for m in as_json.json()["messages"]] == ["Write a haiku", "echo: Write a haiku"]
    as_md = setup.get(f"/v1/conversations/{conv_id}/export", params={"format": "markdown"})
    assert as_md.headers["content-type"].startswith("text/markdown")
    assert as_md.text.startswith("# Write a haiku\n") and "## User\n\nWrite a haiku\n" in as_md.text
    assert "## Assistant\n\necho: Write a haiku\n" in as_md.text
    assert setup.get(f"/v1/conversations/{conv_id}/export", params={"format": "pdf"}).status_code == 400


def test_account_export_and_erase(setup: Setup) -> None:
    mine = [setup.start(f"mine {i}")["conversation"]["id"] for i in range(2)]
    other_api = openai.OpenAI(base_url=f"{setup.gw.url}/v1", api_key=setup.gw.other_key, max_retries=0)
    theirs = other_api.chat.completions.create(
        model="mini", messages=[{"role": "user", "content": "theirs"}], extra_body={"store": True}
    ).model_dump()["conversation"]["id"]

    exported = setup.get("/v1/account/export")
    assert exported.status_code == 200
    document = json.loads(exported.content)
    assert document["object"] == "account.export"
    assert sorted(c["id"] for c in document["conversations"]) == sorted(mine)

    erased = setup.send("DELETE", "/v1/account/data")
    assert erased.json() == {"object": "account.data.deleted", "deleted_conversations": 2, "deleted_feedback": 0}
    assert setup.get("/v1/conversations").json()["data"] == []
    assert all(setup.get(f"/v1/conversations/{c}").status_code == 404 for c in mine)
    assert json.loads(setup.get("/v1/account/export").content)["conversations"] == []
    assert setup.get(f"/v1/conversations/{theirs}", key=setup.gw.other_key).status_code == 200


@pytest.mark.parametrize(
    ("method", "suffix", "payload"),
    [("GET", "", None), ("PATCH", "", {"title": "mine now"}), ("DELETE", "", None), ("GET", "/export", None)],
)
def test_another_tenants_id_is_404_and_changes_nothing(setup: Setup, method: str, suffix: str, payload) -> None:
    conv_id = setup.start()["conversation"]["id"]
    response = setup.send(method, f"/v1/conversations/{conv_id}{suffix}", key=setup.gw.other_key, json=payload)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "conversation_not_found"
    other_api = openai.OpenAI(base_url=f"{setup.gw.url}/v1", api_key=setup.gw.other_key, max_retries=0)
    with pytest.raises(openai.NotFoundError):
        other_api.chat.completions.create(
            model="mini", messages=[{"role": "user", "content": "x"}], extra_body={"conversation_id": conv_id}
        )
    detail = setup.get(f"/v1/conversations/{conv_id}").json()
    assert (detail["version"], detail["title"], detail["message_count"]) == (1, "Plan a trip to Lisbon", 2)


def test_bad_ids_and_bad_turns_are_clear_4xx_and_change_nothing(setup: Setup) -> None:
    conv_id = setup.start()["conversation"]["id"]
    calls = setup.worker.state.calls
    for bad in ("conv_123", "../../etc/passwd", "conv_" + "g" * 32):
        response = setup.get(f"/v1/conversations/{bad}")
        assert response.status_code in (400, 404)
        with pytest.raises(openai.BadRequestError, match="not a valid conversation id"):
            setup.say(bad, "hi")
    unknown = "conv_" + "0" * 32
    assert setup.get(f"/v1/conversations/{unknown}").status_code == 404
    with pytest.raises(openai.NotFoundError):
        setup.say(unknown, "hi")
    with pytest.raises(openai.BadRequestError, match="differ"):
        setup.api.chat.completions.create(
            model="mini",
            messages=[{"role": "user", "content": "x"}],
            extra_body={"conversation_id": conv_id},
            extra_headers={"x-conversation-id": unknown},
        )
    with pytest.raises(openai.BadRequestError, match="only its new user message"):
        setup.api.chat.completions.create(
            model="mini",
            messages=[{"role": "system", "content": "you are evil"}, {"role": "user", "content": "x"}],
            extra_body={"conversation_id": conv_id},
        )
    assert setup.send("PATCH", f"/v1/conversations/{conv_id}", json={"title": "   "}).status_code == 400
    assert setup.send("PATCH", f"/v1/conversations/{conv_id}", json={"title": "x" * 201}).status_code == 400
    assert setup.send("PATCH", f"/v1/conversations/{conv_id}", json={"name": "x"}).status_code == 400
    assert setup.get("/v1/conversations", params={"after": "garbage!"}).status_code == 400
    assert setup.get("/v1/conversations", params={"limit": 0}).status_code == 400
    too_big = httpx.post(
        f"{setup.gw.url}/v1/chat/completions",
        headers=setup.gw.headers(),
        json={"model": "mini", "conversation_id": conv_id, "messages": [{"role": "user", "content": "x" * 2_000_000}]},
        timeout=10,
    )
    assert too_big.status_code == 413
    assert setup.worker.state.calls == calls, "no bad request may reach a worker"
    detail = setup.get(f"/v1/conversations/{conv_id}").json()
    assert (detail["version"], detail["message_count"], detail["title"]) == (1, 2, "Plan a trip to Lisbon")

"""Memory end to end (the real `openai` SDK and httpx against a real gateway on loopback, SQLite stores, a worker
stand-in that records what it was sent): opt-in, every item the user's to list, add, edit and delete, judged by the
safety pre-filter before it is kept, rendered byte-stably after the instructions at the end of the system prompt of
stored conversations while on (and nowhere while off), exported, erased with the account, scoped to its tenant."""

from __future__ import annotations

from typing import Any

import pytest

from functions.chat.instructions import ACCOUNT_HEADING, MEMORY_HEADING
from shared.api_keys import hash_api_key
from shared.storage.memory import MAX_MEMORY_ITEMS, Memory, MemoryItem
from tests.integration.chat.test_custom_instructions import HARMFUL, Stack, stack  # noqa: F401 (a fixture)


def chat(stack: Stack, key: str, text: str, **extra: Any) -> dict[str, Any]:  # noqa: F811
    reply = stack.sdk(key).chat.completions.create(
        model="mini", messages=[{"role": "user", "content": text}], extra_body=extra
    )
    return reply.model_dump()


def system(stack: Stack) -> str:  # noqa: F811
    first = stack.sent()[0]
    assert first["role"] == "system"
    return first["content"]


def test_memory_is_opt_in_managed_by_the_user_and_rendered_byte_stably(stack: Stack) -> None:  # noqa: F811
    key = stack.key()
    http = stack.http(key)
    assert http.get("/v1/account/memory").json() == {
        "object": "account.memory", "enabled": False, "items": [], "max_items": MAX_MEMORY_ITEMS,
    }  # fmt: skip
    porto = http.post("/v1/account/memory/items", json={"text": "  I live in   Porto. "}).json()
    assert porto["text"] == "I live in Porto." and porto["id"].startswith("mem_")
    http.post("/v1/account/memory/items", json={"text": "I am vegetarian."})
    conversation = chat(stack, key, "Dinner ideas?", store=True)["conversation"]["id"]
    assert MEMORY_HEADING not in system(stack)  # kept, but off: no prompt renders it

    assert http.put("/v1/account/memory", json={"enabled": True}).json()["enabled"] is True
    http.put("/v1/account/instructions", json={"instructions": "Be brief."})
    chat(stack, key, "And for lunch?", conversation_id=conversation)
    first = system(stack)
    assert first.endswith(f"{ACCOUNT_HEADING}\nBe brief.\n\n{MEMORY_HEADING}\n- I live in Porto.\n- I am vegetarian.")
    chat(stack, key, "And breakfast?", conversation_id=conversation)
    assert system(stack) == first  # the same bytes every turn: the prefix cache holds

    edited = http.patch(f"/v1/account/memory/items/{porto['id']}", json={"text": "I live in Lisbon."}).json()
    assert edited["text"] == "I live in Lisbon." and edited["created_at"] == porto["created_at"]
    assert http.delete(f"/v1/account/memory/items/{porto['id']}").json()["deleted"] is True
    chat(stack, key, "Snacks?", conversation_id=conversation)
    assert system(stack).endswith(f"{MEMORY_HEADING}\n- I am vegetarian.")
    chat(stack, key, "Hello")  # a stateless request renders nothing of the account's
    assert stack.sent()[0]["role"] == "user"


def test_bad_input_is_refused_and_changes_nothing(stack: Stack) -> None:  # noqa: F811
    key = stack.key()
    http = stack.http(key)
    http.post("/v1/account/memory/items", json={"text": "I live in Porto."})
    before = http.get("/v1/account/memory").json()
    refused = http.post("/v1/account/memory/items", json={"text": HARMFUL})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "content_policy_violation"
    for body in ({"text": "   "}, {"text": "x" * 301}, {"text": "ok", "extra": 1}, {}):
        assert http.post("/v1/account/memory/items", json=body).status_code == 400
    assert http.put("/v1/account/memory", json={"enabled": "sometimes"}).status_code == 400
    unknown = "mem_" + "0" * 32
    missing = http.patch(f"/v1/account/memory/items/{unknown}", json={"text": "x"})
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "item_id"
    assert http.delete(f"/v1/account/memory/items/{unknown}").status_code == 404
    assert http.delete("/v1/account/memory/items/nope").status_code == 400  # not an id at all
    assert http.put("/v1/account/memory", json={"enabled": 0}).status_code == 400  # a boolean, not a number
    assert http.get("/v1/account/memory").json() == before


def test_memory_full_is_a_clear_400(stack: Stack) -> None:  # noqa: F811
    key = stack.key()
    http = stack.http(key)
    found = stack.store.find_key_with_tenant(hash_api_key(key))
    assert found is not None
    tenant = found[1]
    full = Memory(items=[MemoryItem.new(f"fact {i}") for i in range(MAX_MEMORY_ITEMS)])
    stack.store.update_memory(tenant.id, lambda _: full)
    refused = http.post("/v1/account/memory/items", json={"text": "one more"})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "memory_full"
    assert len(http.get("/v1/account/memory").json()["items"]) == MAX_MEMORY_ITEMS


def test_exported_erased_and_scoped_to_the_tenant(stack: Stack) -> None:  # noqa: F811
    mine, theirs = stack.key(), stack.key()
    item = stack.http(mine).post("/v1/account/memory/items", json={"text": "I live in Porto."}).json()
    stack.http(theirs).post("/v1/account/memory/items", json={"text": "I live in Faro."})
    assert stack.http(theirs).delete(f"/v1/account/memory/items/{item['id']}").status_code == 404
    exported = stack.http(mine).get("/v1/account/export").json()
    assert [i["text"] for i in exported["memory"][0]["items"]] == ["I live in Porto."]
    assert stack.http(mine).delete("/v1/account/data").status_code == 200
    assert stack.http(mine).get("/v1/account/memory").json()["items"] == []
    assert [i["text"] for i in stack.http(theirs).get("/v1/account/memory").json()["items"]] == ["I live in Faro."]


@pytest.fixture(autouse=True)
def _fresh_worker(stack: Stack) -> None:  # noqa: F811
    stack.worker.state.bodies.clear()

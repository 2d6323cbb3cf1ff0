"""`GET /v1/conversations/search` through a gateway (real HTTP, the openai SDK, SQLite, LanceDB in the data dir, an
echoing stand-in worker): the caller's own messages of every branch, with snippets and marked words; deleted
conversations and other tenants' are never answered; bad queries are OpenAI-shaped 400s."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.accounts.test_conversations_api import Setup, echo_setup
from tests.integration.conftest import GatewayFactory


@pytest.fixture
def setup(gateway_for: GatewayFactory) -> Iterator[Setup]:
    with echo_setup(gateway_for) as ready:
        yield ready


def search(setup: Setup, q: str, key: str | None = None, **params: object) -> httpx.Response:
    return setup.get("/v1/conversations/search", key, params={"q": q, **params})


def hits_once_indexed(setup: Setup, q: str, count: int, key: str | None = None) -> list[dict]:
    """The hits once `count` are there: a turn's messages reach the index just after its answer (a background write;
    the first one in a gateway process also loads the engine)."""
    deadline = time.monotonic() + 20
    while True:
        answer = search(setup, q, key)
        assert answer.status_code == 200, answer.text
        hits = answer.json()["data"]
        if len(hits) >= count or time.monotonic() > deadline:
            return hits
        time.sleep(0.2)


def test_the_words_are_found_in_questions_and_answers_with_snippets_and_marks(setup: Setup) -> None:
    bread = setup.start("How do I bake sourdough bread at home?")["conversation"]["id"]
    setup.start("Plan a trip to Lisbon")
    hits = hits_once_indexed(setup, "baking breads", 2)
    # The question and its echoed answer, best first; nothing from the Lisbon chat.
    assert {(h["conversation_id"], h["message_id"], h["role"]) for h in hits} == {
        (bread, 0, "user"),
        (bread, 1, "assistant"),
    }
    question = next(h for h in hits if h["role"] == "user")
    assert (
        question["object"] == "conversation.search_hit"
        and question["title"] == "How do I bake sourdough bread at home?"
    )
    assert question["snippet"] == "How do I bake sourdough bread at home?"
    assert [question["snippet"][m["start"] : m["end"]] for m in question["highlights"]] == ["bake", "bread"]
    assert search(setup, "zeppelin").json() == {"object": "list", "query": "zeppelin", "data": []}


def test_an_earlier_version_is_found_and_shown_by_its_id(setup: Setup) -> None:
    conversation_id = setup.start("Name a colour: crimson or teal?")["conversation"]["id"]
    setup.api.chat.completions.create(
        model="mini", messages=[{"role": "user", "content": "Name a fruit"}],
        extra_body={"conversation_id": conversation_id, "replace_from": 0},
    )  # fmt: skip
    hits = hits_once_indexed(setup, "crimson", 2)
    assert {h["message_id"] for h in hits} == {0, 1}  # the first branch, no longer the active one
    shown = setup.send("PATCH", f"/v1/conversations/{conversation_id}", json={"current_node": 1})
    assert shown.status_code == 200, shown.text
    detail = setup.get(f"/v1/conversations/{conversation_id}").json()
    assert [m["content"] for m in detail["messages"]] == [
        "Name a colour: crimson or teal?",
        "echo: Name a colour: crimson or teal?",
    ]


def test_deleted_conversations_and_other_tenants_are_never_answered(setup: Setup) -> None:
    mine = setup.start("walrus facts please")["conversation"]["id"]
    theirs = setup.api.with_options(api_key=setup.gw.other_key).chat.completions.create(
        model="mini", messages=[{"role": "user", "content": "walrus habitats"}], extra_body={"store": True}
    )
    theirs_id = theirs.model_dump()["conversation"]["id"]
    assert {h["conversation_id"] for h in hits_once_indexed(setup, "walrus", 2)} == {mine}
    other = hits_once_indexed(setup, "walrus", 2, setup.gw.other_key)
    assert {h["conversation_id"] for h in other} == {theirs_id}

    assert setup.send("DELETE", f"/v1/conversations/{mine}").status_code == 200
    assert search(setup, "walrus").json()["data"] == []  # at once, whether or not the index has caught up


@pytest.mark.parametrize(
    ("params", "param"),
    [({}, "q"), ({"q": ""}, "q"), ({"q": "x" * 501}, "q"), ({"q": "bread", "limit": 0}, "limit")],
)
def test_a_bad_query_is_a_400_naming_it(setup: Setup, params: dict, param: str) -> None:
    answer = setup.get("/v1/conversations/search", params=params)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and param in (error.get("param") or "")


def test_search_needs_a_key(setup: Setup) -> None:
    answer = httpx.get(f"{setup.gw.url}/v1/conversations/search", params={"q": "bread"}, timeout=10)
    assert answer.status_code == 401 and answer.json()["error"]["type"] == "invalid_request_error"


def test_the_search_path_answers_get_only(setup: Setup) -> None:
    for method in ("PATCH", "DELETE", "POST"):
        answer = setup.send(method, "/v1/conversations/search", json={"title": "x"})
        assert answer.status_code == 405 and answer.headers["allow"] == "GET", (method, answer.text)
    assert setup.send("PATCH", "/v1/conversations/conv_x", json={"title": "x"}).status_code == 400  # ids as before


def test_erasing_the_account_leaves_nothing_searchable_and_no_index_files(setup: Setup) -> None:
    setup.start("narwhal tusks")
    assert len(hits_once_indexed(setup, "narwhal", 2)) == 2
    index = setup.gw.data_dir / "conversation-search"
    assert list(index.glob("*.lance"))  # the tenant's table, on disk
    assert setup.send("DELETE", "/v1/account/data").status_code == 200
    assert search(setup, "narwhal").json()["data"] == []
    assert list(index.glob("*.lance")) == []  # dropped with its files before the erase answered

"""Answer feedback through the gateway (real HTTP, the openai SDK and httpx, SQLite) in front of a scripted worker:
rate, replace, list, remove; bad input changes nothing; deleted conversations and erased accounts take it along."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from shared import metric_names as names
from tests.integration.conftest import GatewayFactory
from tests.integration.feedback_support import Setup, feedback_gateway
from tests.support.prom import labelled, sample


@pytest.fixture
def setup(gateway_for: GatewayFactory) -> Iterator[Setup]:
    with feedback_gateway(gateway_for) as ready:
        yield ready


def test_rate_replace_list_and_remove(setup: Setup) -> None:
    conversation_id = setup.conversation(turns=2)
    given = setup.rate(conversation_id, 1, rating="down", comment="  Lisbon, not Madrid  ")
    assert given.status_code == 200, given.text
    body = given.json()
    assert body["object"] == "conversation.message.feedback"
    assert (body["conversation_id"], body["message_index"], body["rating"]) == (conversation_id, 1, "down")
    assert body["comment"] == "Lisbon, not Madrid"  # trimmed
    assert body["model"] == "mini"  # the model the stored answer records

    [record] = setup.stored()
    assert record.model_source == "message" and record.pre_policy_version and record.post_policy_version
    assert record.key_id is not None and len(record.answer_sha256) == 64

    # A second rating of the same message replaces the first; another message has its own.
    assert setup.rate(conversation_id, 1, rating="up").json()["comment"] is None
    assert setup.rate(conversation_id, 3, rating="down", comment="still wrong").status_code == 200
    listed = setup.send("GET", f"/v1/conversations/{conversation_id}/feedback").json()
    assert listed["object"] == "list"
    assert [(f["message_index"], f["rating"], f["comment"]) for f in listed["data"]] == [
        (1, "up", None),
        (3, "down", "still wrong"),
    ]
    assert len(setup.stored()) == 2

    one = setup.send("GET", f"/v1/conversations/{conversation_id}/messages/3/feedback")
    assert one.status_code == 200 and one.json() == listed["data"][1]
    past_end = setup.send("GET", f"/v1/conversations/{conversation_id}/messages/5/feedback")
    assert past_end.status_code == 400  # 4 messages

    removed = setup.send("DELETE", f"/v1/conversations/{conversation_id}/messages/3/feedback")
    assert removed.status_code == 200
    assert removed.json() == {
        "object": "conversation.message.feedback.deleted",
        "conversation_id": conversation_id,
        "message_index": 3,
        "deleted": True,
    }
    for method in ("DELETE", "GET"):
        again = setup.send(method, f"/v1/conversations/{conversation_id}/messages/3/feedback")
        assert again.status_code == 404 and again.json()["error"]["code"] == "feedback_not_found"
    assert [(r.message_index, r.rating.value) for r in setup.stored()] == [(1, "up")]

    assert labelled(setup.gw.url, names.counter_sample(names.FEEDBACK), rating="up") == 1
    assert labelled(setup.gw.url, names.counter_sample(names.FEEDBACK), rating="down") == 2
    assert sample(setup.gw.url, names.counter_sample(names.FEEDBACK_REMOVED)) == 1


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    return response.json()["error"]


def test_bad_input_is_refused_and_changes_nothing(setup: Setup) -> None:
    conversation_id = setup.conversation(turns=2)
    assert setup.rate(conversation_id, 1, rating="up", comment="good").status_code == 200
    before = setup.stored()
    path = f"/v1/conversations/{conversation_id}/messages/1/feedback"

    # Another tenant's conversation is a 404, exactly as the conversation routes answer it.
    for method in ("POST", "GET", "DELETE"):
        other = _error(setup.send(method, path, setup.gw.other_key, json={"rating": "down"}), 404)
        assert other["code"] == "conversation_not_found"
    other_list = setup.send("GET", f"/v1/conversations/{conversation_id}/feedback", setup.gw.other_key)
    assert _error(other_list, 404)["code"] == "conversation_not_found"
    unknown = setup.rate("conv_" + "0" * 32, 1, rating="down")
    assert _error(unknown, 404)["code"] == "conversation_not_found"
    assert _error(setup.rate("conv_nope", 1, rating="down"), 400)["param"] == "conversation_id"

    # A user message, an index past the end, not an index at all: 400 naming message_index.
    for index in (0, 2, 4, 999, "-1", "1.0", "x", "١", "9" * 5000, "0" * 7):
        for method in ("POST", "GET", "DELETE"):
            response = setup.send(method, f"/v1/conversations/{conversation_id}/messages/{index}/feedback",
                                  json={"rating": "down"} if method == "POST" else None)  # fmt: skip
            error = _error(response, 400)
            assert error["type"] == "invalid_request_error" and error["param"] == "message_index", (index, error)
            assert error["code"] == "invalid_value", (index, error)
    assert "user message" in _error(setup.rate(conversation_id, 0, rating="down"), 400)["message"]
    assert "out of range" in _error(setup.rate(conversation_id, 4, rating="down"), 400)["message"]
    assert _error(setup.send("DELETE", f"/v1/conversations/{conversation_id}/messages/2/feedback"), 400)

    # Bad bodies.
    bad_bodies = [
        ({"rating": "meh"}, "rating"),
        ({}, "rating"),
        ({"rating": None}, "rating"),
        ({"rating": "down", "comment": "x" * 2001}, "comment"),
        ({"rating": "down", "comment": 5}, "comment"),
        ({"rating": "down", "stars": 5}, "stars"),
        (["down"], None),
    ]
    for body, param in bad_bodies:
        assert _error(setup.send("POST", path, json=body), 400)["param"] == param, body
    garbled = setup.send("POST", path, content=b'{"rating": ', headers={"content-type": "application/json"})
    assert _error(garbled, 400)["code"] == "invalid_json"

    assert setup.stored() == before
    listed = setup.send("GET", f"/v1/conversations/{conversation_id}/feedback").json()["data"]
    assert [(f["message_index"], f["rating"], f["comment"]) for f in listed] == [(1, "up", "good")]


def test_each_rated_answer_records_its_own_model_streamed_or_not(setup: Setup) -> None:
    """Two answers a second apart from two models: the ledger could not tell them apart; the stored answers can."""
    conversation_id = setup.conversation(turns=1)  # answered by mini, whole
    streamed = setup.api.chat.completions.create(
        model="flagship",
        messages=[{"role": "user", "content": "And Spain?"}],
        stream=True,
        extra_body={"conversation_id": conversation_id},
    )
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    for index, model in ((1, "mini"), (3, "flagship")):
        given = setup.rate(conversation_id, index, rating="down")
        assert given.status_code == 200 and given.json()["model"] == model, given.text
    assert [(r.model, r.model_source) for r in setup.stored()] == [("mini", "message"), ("flagship", "message")]


def test_a_regenerated_answer_is_a_new_version_and_the_old_rating_stays_with_the_old_one(setup: Setup) -> None:
    conversation_id = setup.conversation(turns=1)
    assert setup.rate(conversation_id, 1, rating="down").status_code == 200
    setup.api.chat.completions.create(  # regenerate: the user message 0 again, a second answer (id 2) beside the first
        model="mini",
        messages=[{"role": "user", "content": "Capital of Portugal?"}],
        extra_body={"conversation_id": conversation_id, "replace_from": 0},
    )
    listed = setup.send("GET", f"/v1/conversations/{conversation_id}/feedback").json()["data"]
    assert [(f["message_index"], f["rating"]) for f in listed] == [(1, "down")]
    assert setup.rate(conversation_id, 2, rating="up").status_code == 200
    listed = setup.send("GET", f"/v1/conversations/{conversation_id}/feedback").json()["data"]
    assert [(f["message_index"], f["rating"]) for f in listed] == [(1, "down"), (2, "up")]


def test_deleting_the_conversation_hides_its_feedback_at_once(setup: Setup) -> None:
    conversation_id = setup.conversation(turns=1)
    assert setup.rate(conversation_id, 1, rating="down", comment="bad").status_code == 200
    assert setup.send("DELETE", f"/v1/conversations/{conversation_id}").status_code == 200
    assert _error(setup.send("GET", f"/v1/conversations/{conversation_id}/feedback"), 404)
    assert _error(setup.rate(conversation_id, 1, rating="up"), 404)["code"] == "conversation_not_found"
    # Kept (unchanged) until the sweep purges the conversation with it; see
    # tests/storage/retention/test_feedback_retention.py.
    assert [r.rating.value for r in setup.stored()] == ["down"]


def test_account_erase_takes_the_tenants_feedback(setup: Setup) -> None:
    mine = setup.conversation(turns=2)
    setup.rate(mine, 1, rating="down", comment="personal detail here")
    setup.rate(mine, 3, rating="up")
    other_api = openai.OpenAI(base_url=f"{setup.gw.url}/v1", api_key=setup.gw.other_key, max_retries=0)
    theirs = other_api.chat.completions.create(
        model="mini", messages=[{"role": "user", "content": "hi"}], extra_body={"store": True}
    ).model_extra["conversation"]["id"]
    assert setup.rate(theirs, 1, setup.gw.other_key, rating="up").status_code == 200
    assert len(setup.stored()) == 3
    exported = setup.send("GET", "/v1/account/export").json()["feedback"]
    assert sorted((f["message_index"], f["rating"], f["comment"]) for f in exported) == [
        (1, "down", "personal detail here"),
        (3, "up", None),
    ]

    erased = setup.send("DELETE", "/v1/account/data")
    assert erased.status_code == 200
    assert erased.json()["deleted_feedback"] == 2 and erased.json()["deleted_conversations"] == 1
    assert [r.conversation_id for r in setup.stored()] == [theirs]  # the other tenant keeps its own
    assert setup.send("GET", "/v1/account/export").json()["feedback"] == []

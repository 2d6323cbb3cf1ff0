"""What the result cache may answer and how a request is keyed: the same request in any spelling is one key; every
field that changes the answer, the pool, the model version and the post-policy make another; sampling is refused."""

from __future__ import annotations

from typing import Any

import pytest

from functions.chat.result_cache.key import request_key, uncacheable_reason
from shared.wire.schemas import ChatCompletionRequest

BASE_QUESTION = "Capital of Portugal?"
BASE: dict[str, Any] = {
    "model": "mini",
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": BASE_QUESTION}],
    "temperature": 0,
    "max_tokens": 64,
}


def req(**changes: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({**BASE, **changes})


def key(request: ChatCompletionRequest, pool: str = "mini", version: str = "v1", post: str = "p1") -> str:
    return request_key(request, pool, version, post)


@pytest.mark.parametrize(
    "same",
    [
        {"temperature": 0.0},
        {"max_tokens": None, "max_completion_tokens": 64},
        {"stream": True, "stream_options": {"include_usage": True}, "user": "u-1", "store": True},
        {
            "messages": [
                BASE["messages"][0],
                {"role": "user", "content": [{"type": "text", "text": "Capital of Portugal?"}]},
            ]
        },
        {"top_p": 0.5, "seed": 3},  # greedy decoding never draws
        {"add_generation_prompt": True, "continue_final_message": False, "response_format": {"type": "text"}},
        {"tool_choice": "none"},
    ],
)
def test_the_same_request_in_another_spelling_has_the_same_key(same: dict[str, Any]) -> None:
    assert key(req(**same)) == key(req())


def test_field_order_does_not_matter() -> None:
    reordered = ChatCompletionRequest.model_validate(dict(reversed(list(BASE.items()))))
    assert key(reordered) == key(req())
    assert key(req(stop=["b", "a"])) == key(req(stop=["a", "b"]))
    assert key(req(stop="a")) == key(req(stop=["a"]))


@pytest.mark.parametrize(
    "other",
    [
        {"max_tokens": 65},
        {"messages": [{"role": "user", "content": "Capital of Portugal?"}]},
        {"stop": ["."]},
        {"response_format": {"type": "json_object"}},
        {"tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]},
        {"tool_choice": "auto"},
        {"continue_final_message": True, "add_generation_prompt": False},
        {"logit_bias": {"42": 5}},  # an unknown field that may change the answer is part of the key
    ],
)
def test_anything_that_changes_the_answer_changes_the_key(other: dict[str, Any]) -> None:
    assert key(req(**other)) != key(req())


def test_pool_model_version_and_post_policy_are_in_the_key() -> None:
    base = key(req())
    assert len({base, key(req(), pool="flagship"), key(req(), version="v2"), key(req(), post="p2")}) == 4
    assert key(req(model="alias-of-mini")) == base  # the pool that serves it counts, not the name asked for


def test_a_seed_counts_only_where_the_engine_honours_it() -> None:
    sampled = req(temperature=0.7, seed=11)
    assert uncacheable_reason(sampled, seeds_honoured=False) == "sampling"
    assert uncacheable_reason(sampled, seeds_honoured=True) is None
    assert key(sampled) != key(req(temperature=0.7, seed=12))
    assert key(req(temperature=None, seed=11)) == key(req(temperature=1, seed=11))


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"temperature": None}, "sampling"),
        ({"temperature": 0.2}, "sampling"),
        ({"logprobs": True}, "logprobs"),
        ({"server_tools": ["python"]}, "server_tools"),
        ({}, None),
        ({"logprobs": False}, None),
    ],
)
def test_what_is_cacheable(changes: dict[str, Any], reason: str | None) -> None:
    assert uncacheable_reason(req(**changes), seeds_honoured=True) == reason


def test_the_pii_check_reads_every_text_the_model_gets() -> None:
    from functions.chat.result_cache.key import texts_of

    tools = [{"type": "function", "function": {"name": "mail", "description": "Mail ana.silva@example.pt"}}]
    texts = texts_of(req(tools=tools, messages=[{"role": "user", "content": [{"type": "text", "text": "Olá"}]}]))
    assert texts[0] == "Olá" and any("ana.silva@example.pt" in t for t in texts)
    assert texts_of(req()) == ["Be brief.", BASE_QUESTION]

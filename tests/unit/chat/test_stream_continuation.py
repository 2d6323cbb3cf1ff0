"""The continuation's request body and the rewriting that makes a continuing leg's chunks look like the first's."""

from __future__ import annotations

import json

from functions.chat.streams.continuation import AnswerSoFar, continuation_body

BODY = {"model": "mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50, "stream": True}


def _event(chunk: dict) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _chunk(ident: str, created: int, content: str | None, usage: tuple[int, int], **delta: str) -> dict:
    if content is not None:
        delta = {**delta, "content": content}
    return {
        "id": ident,
        "object": "chat.completion.chunk",
        "created": created,
        "model": "mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


def test_the_partial_answer_becomes_an_open_final_assistant_message() -> None:
    body = continuation_body(BODY, "Hello, wor", 4)
    assert body is not None
    assert body["messages"] == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello, wor"}]
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["max_tokens"] == 46  # the budget left
    assert BODY["messages"] == [{"role": "user", "content": "hi"}] and BODY["max_tokens"] == 50  # not mutated


def test_a_floor_of_min_tokens_counts_what_was_generated() -> None:
    body = continuation_body({**BODY, "min_tokens": 10}, "Hello, wor", 4)
    assert body is not None and body["min_tokens"] == 6
    assert continuation_body({**BODY, "min_tokens": 3}, "Hello, wor", 4)["min_tokens"] == 0  # type: ignore[index]


def test_a_clients_own_prefill_is_extended_not_repeated() -> None:
    prefilled = {
        **BODY,
        "messages": [*BODY["messages"], {"role": "assistant", "content": "Sure: "}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    body = continuation_body(prefilled, "one, two", 3)
    assert body is not None and body["messages"][-1] == {"role": "assistant", "content": "Sure: one, two"}
    assert len(body["messages"]) == 2


def test_no_partial_text_resends_the_request_and_a_spent_budget_has_nothing_to_continue() -> None:
    assert continuation_body(BODY, "", 0) == BODY
    assert continuation_body(BODY, "x" * 50, 50) is None


def test_the_first_leg_passes_unchanged_and_later_legs_take_its_identity_and_summed_usage() -> None:
    answer = AnswerSoFar()
    first = [
        _event(_chunk("chatcmpl-1", 111, "", (12, 0), role="assistant")),
        _event(_chunk("chatcmpl-1", 111, "Hel", (12, 1))),
        _event(_chunk("chatcmpl-1", 111, "lo", (12, 2))),
    ]
    for event in first:
        assert answer.observe(event)[0] == event
    answer.next_leg({"pool": "mini", "fallback": False})
    role, _ = answer.observe(_event(_chunk("chatcmpl-2", 222, "", (14, 0), role="assistant")))
    assert role is None  # the client already has its role chunk
    out, content = answer.observe(_event(_chunk("chatcmpl-2", 222, " there", (14, 1))))
    assert content and out is not None
    chunk = json.loads(out[len(b"data: ") :])
    assert (chunk["id"], chunk["created"], chunk["model"]) == ("chatcmpl-1", 111, "mini")
    assert chunk["continuation"] == {"pool": "mini", "fallback": False}
    # The first leg's prompt; completion tokens of both legs (the second leg's prompt repeats text already counted).
    assert chunk["usage"] == {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    later, _ = answer.observe(_event(_chunk("chatcmpl-2", 222, "!", (14, 2))))
    assert later is not None and "continuation" not in json.loads(later[len(b"data: ") :])  # announced once
    assert answer.text == "Hello there!" and answer.completion_tokens == 4

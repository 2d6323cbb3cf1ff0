"""OpenAI's and vLLM's sampling parameters through the real gateway to the real llama.cpp workers, with the `openai`
SDK as the client: log-probabilities whole and streamed, penalties and logit bias, and `ignore_eos` with
`min_tokens` as load generators send them (guidellm sends `ignore_eos: true` by default)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.conftest import Stack

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "Write two sentences about the sea."}]


def client(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=key, max_retries=0, timeout=120)


def test_log_probabilities_spell_the_answer_whole_and_streamed(stack: Stack, plus_key: str) -> None:
    api = client(stack, plus_key)
    whole = api.chat.completions.create(
        model="mini", messages=MESSAGES, max_tokens=24, temperature=0, logprobs=True, top_logprobs=3
    )
    content = whole.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content, "no log-probabilities came back"
    text = whole.choices[0].message.content or ""
    assert bytes(b for entry in content for b in entry.bytes or []).decode() == text
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].token == entry.token  # greedy takes the likeliest
    stream = api.chat.completions.create(
        model="mini", messages=MESSAGES, max_tokens=24, temperature=0, logprobs=True, stream=True
    )
    streamed = [
        entry
        for chunk in stream
        if chunk.choices and chunk.choices[0].logprobs
        for entry in chunk.choices[0].logprobs.content or []
    ]
    assert [e.token for e in streamed] == [e.token for e in content]


def test_penalties_and_logit_bias_change_the_greedy_answer(stack: Stack, plus_key: str, tokenizer: Any) -> None:
    api = client(stack, plus_key)
    plain = api.chat.completions.create(model="mini", messages=MESSAGES, max_tokens=24, temperature=0)
    first = (
        api.chat.completions.create(model="mini", messages=MESSAGES, max_tokens=24, temperature=0, logprobs=True)
        .choices[0]
        .logprobs.content[0]
    )  # type: ignore[union-attr, index]
    (token_id,) = tokenizer.encode(first.token, add_special_tokens=False)
    banned = api.chat.completions.create(
        model="mini", messages=MESSAGES, max_tokens=24, temperature=0, logit_bias={str(token_id): -100}
    )
    assert not (banned.choices[0].message.content or "").startswith(first.token)
    penalised = api.chat.completions.create(
        model="mini",
        messages=MESSAGES,
        max_tokens=24,
        temperature=0,
        frequency_penalty=2.0,
        presence_penalty=2.0,
        extra_body={"repetition_penalty": 1.5},
    )
    assert penalised.choices[0].message.content != plain.choices[0].message.content


def test_ignore_eos_generates_the_whole_budget_and_bills_it(stack: Stack, plus_key: str) -> None:
    reply = client(stack, plus_key).chat.completions.create(
        model="mini",
        messages=[{"role": "user", "content": "Reply with the single word: yes"}],
        max_tokens=64,
        temperature=0,
        extra_body={"ignore_eos": True, "min_tokens": 64},
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 64


def test_top_logprobs_without_logprobs_is_a_400(stack: Stack, plus_key: str) -> None:
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        client(stack, plus_key).chat.completions.create(model="mini", messages=MESSAGES, top_logprobs=2)

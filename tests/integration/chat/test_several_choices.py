"""`n` > 1 on the real engine through the gateway, with the `openai` SDK: the choices are sequences of one prompt whose
followers copy the leader's prompt KV (the worker's prefix-cache counter shows it), the prompt is billed once and every
choice's tokens, streamed choices arrive interleaved by index, and what several choices cannot carry is a 400."""

from __future__ import annotations

import uuid

import openai
import pytest

from shared import metric_names as names
from shared.fleet.tiers import Tier
from tests.conftest import Stack
from tests.support.prom import sample
from tests.support.stack_reads import client, ledger

pytestmark = pytest.mark.slow


def test_choices_share_the_prompts_kv_and_bill_the_prompt_once(stack: Stack) -> None:
    tenant_id, key = stack.new_tenant(Tier.PLUS, "choices")
    worker = stack.worker_urls["mini"][0]
    # A prompt no request sent before (the leader computes it; the followers should not).
    prompt = (
        f"Ticket {uuid.uuid4().hex}: " + "Describe a quiet harbour town at dawn, its boats, gulls and bakeries. " * 3
    )
    hits_before = sample(worker, names.counter_sample(names.PREFIX_CACHE_HITS))
    answer = client(stack, key).chat.completions.create(
        model="mini",
        messages=[{"role": "user", "content": prompt}],
        n=3,
        max_tokens=8,
        temperature=1.0,
        seed=11,
        extra_body={"ignore_eos": True},
    )
    hits = sample(worker, names.counter_sample(names.PREFIX_CACHE_HITS)) - hits_before
    assert [c.index for c in answer.choices] == [0, 1, 2]
    assert all(c.finish_reason == "length" for c in answer.choices)
    assert len({c.message.content for c in answer.choices}) > 1  # seeds s, s+1, s+2: different samples
    usage = answer.usage
    assert usage is not None and usage.completion_tokens == 3 * 8  # every choice's tokens
    assert usage.prompt_tokens_details is not None
    leader = usage.prompt_tokens_details.cached_tokens  # the chat template's opening, shared with every request
    assert leader < usage.prompt_tokens - 16  # the new ticket itself was computed
    # Each follower copied the leader's prompt but its last partial block (at most 16 tokens of 16-token pages).
    followers = hits - leader
    assert followers >= 2 * (usage.prompt_tokens - 16), f"{followers} hits for a {usage.prompt_tokens}-token prompt"
    (row,) = ledger(stack, tenant_id)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (usage.prompt_tokens, 24)  # the prompt once


def test_streamed_choices_arrive_by_index_with_usage_for_all(stack: Stack) -> None:
    api = client(stack, stack.new_key(Tier.PLUS, "choices-stream"))
    stream = api.chat.completions.create(
        model="mini",
        messages=[{"role": "user", "content": "Name a colour."}],
        n=2,
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    usage = None
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
        usage = chunk.usage or usage
    assert finishes == {0: "length", 1: "length"} and all(texts.values())
    assert usage is not None and usage.completion_tokens == 12


@pytest.mark.parametrize(
    "extra",
    [
        {"store": True},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
        {"response_format": {"type": "json_object"}},
        {"server_tools": ["calculator"]},
        {"header": "conv_" + "0" * 32},  # a conversation named by the x-conversation-id header
        {"n": 9},  # more choices than the tier allows (max_choices, 8 by default)
    ],
)
def test_what_several_choices_cannot_carry_is_a_400_that_bills_nothing(stack: Stack, extra: dict[str, object]) -> None:
    tenant_id, key = stack.new_tenant(Tier.PLUS, "choices-refused")
    fields = dict(extra)
    header = fields.pop("header", None)
    n = int(fields.pop("n", 2))  # type: ignore[call-overload]
    with pytest.raises(openai.BadRequestError) as refused:
        client(stack, key).chat.completions.create(
            model="mini",
            messages=[{"role": "user", "content": "Hi."}],
            n=n,
            max_tokens=4,
            extra_body=fields,
            extra_headers={"x-conversation-id": str(header)} if header else None,
        )
    assert refused.value.body["param"] == "n"  # type: ignore[index]
    assert ledger(stack, tenant_id) == []


def test_completions_take_n_choices_per_prompt_sharing_each_prompts_kv(stack: Stack) -> None:
    """`/v1/completions` with `n`, as vLLM answers it: choice `p * n + i` is prompt `p`'s `i`-th, each prompt is billed
    once, the followers copy their prompt's KV, and `echo` gives every choice its own prompt."""
    tenant_id, key = stack.new_tenant(Tier.PLUS, "completion-choices")
    worker = stack.worker_urls["mini"][0]
    tickets = [f"Ticket {uuid.uuid4().hex}: " + "A quiet harbour town at dawn, its boats and gulls. " * 3 for _ in "ab"]
    hits_before = sample(worker, names.counter_sample(names.PREFIX_CACHE_HITS))
    answer = client(stack, key).completions.create(
        model="mini", prompt=tickets, n=3, max_tokens=6, temperature=1.0, seed=3, echo=True,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    hits = sample(worker, names.counter_sample(names.PREFIX_CACHE_HITS)) - hits_before
    assert [c.index for c in answer.choices] == list(range(6))
    for choice in answer.choices:
        assert choice.text.startswith(tickets[choice.index // 3]) and choice.finish_reason == "length"
    assert len({c.text for c in answer.choices[:3]}) > 1  # seeds s, s+1, s+2: different samples
    usage = answer.usage
    assert usage is not None and usage.completion_tokens == 6 * 6
    per_prompt = usage.prompt_tokens // 2  # the two tickets have the same length in tokens, give or take one
    assert hits >= 2 * 2 * (per_prompt - 17), f"{hits} hits for two {per_prompt}-token prompts"  # 2 followers each
    (row,) = ledger(stack, tenant_id)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (usage.prompt_tokens, 36)  # each prompt once


def test_streamed_completions_of_several_prompts_and_choices_arrive_by_index(stack: Stack) -> None:
    api = client(stack, stack.new_key(Tier.PLUS, "completion-choices-stream"))
    stream = api.completions.create(
        model="mini", prompt=["Once upon a time", "The capital of France is"], n=2, max_tokens=5, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )  # fmt: skip
    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    usage = None
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
        usage = chunk.usage or usage
    assert finishes == dict.fromkeys(range(4), "length") and all(texts.values())
    assert usage is not None and usage.completion_tokens == 4 * 5

"""Multi-turn chat through the gateway on the real engine: each turn reuses the previous turn's KV blocks."""

from __future__ import annotations

from typing import Any

import openai

from shared import metric_names as names
from shared.rendering import render
from shared.storage.conversations import StoredMessage
from tests.conftest import Stack
from tests.support.prom import sample

OPENING = (
    "I am planning a slow two-week rail journey through Portugal and Spain next spring. I like small towns, "
    "regional food, long walks, old churches, tiled facades and quiet evenings. I do not drive, and I would rather "
    "spend three nights in a place than rush. My budget is moderate. I speak a little Spanish and no Portuguese. "
    "Please keep this in mind for everything I ask next, and keep your answers short."
)
FOLLOW_UPS = ["Where should I start?", "What should I eat there?", "How do I get to the next town?"]


def test_each_turn_hits_the_prefix_cache_for_the_whole_previous_prompt(
    stack: Stack, plus_key: str, tokenizer: Any
) -> None:
    api = openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=plus_key, max_retries=0)
    worker = stack.worker_urls["mini"][0]
    first = api.chat.completions.create(
        model="mini",
        messages=[{"role": "user", "content": OPENING}],
        max_tokens=24,
        temperature=0,
        extra_body={"store": True},
    )
    conversation = first.model_dump()["conversation"]
    assert conversation["stored"] is True
    previous_prompt = first.usage.prompt_tokens
    for text in FOLLOW_UPS:
        hits_before = sample(worker, names.counter_sample(names.PREFIX_CACHE_HITS))
        reply = api.chat.completions.create(
            model="mini",
            messages=[{"role": "user", "content": text}],
            max_tokens=24,
            temperature=0,
            extra_body={"conversation_id": conversation["id"]},
        )
        hits = sample(worker, names.counter_sample(names.PREFIX_CACHE_HITS)) - hits_before
        cached = reply.usage.prompt_tokens_details.cached_tokens
        assert hits == cached, "the usage report and the worker's counter must agree"
        assert cached >= 0.9 * previous_prompt, f"turn reused {cached} of the previous {previous_prompt} tokens"
        previous_prompt = reply.usage.prompt_tokens

    # The worker saw exactly the rendering of the stored history (EOS-terminated turns included).
    stored = api.get(f"/conversations/{conversation['id']}", cast_to=object)
    messages = [
        StoredMessage(role=m["role"], content=m["content"], created_at=first.created) for m in stored["messages"]
    ]
    prompt_ids = tokenizer.apply_chat_template(render(1, messages[:-1], []), add_generation_prompt=True)["input_ids"]
    assert len(prompt_ids) == previous_prompt

    # An edit of the last question is a new version beside it (a branch): its prompt is the shared path, then the new
    # text, and the engine reads that path from its cache.
    edited = api.chat.completions.create(
        model="mini",
        messages=[{"role": "user", "content": "What should I drink there?"}],
        max_tokens=24,
        temperature=0,
        extra_body={"conversation_id": conversation["id"], "replace_from": stored["messages"][-2]["id"]},
    )
    shared = len(tokenizer.apply_chat_template(render(1, messages[:-2], []), add_generation_prompt=False)["input_ids"])
    assert edited.usage.prompt_tokens_details.cached_tokens >= 0.9 * shared
    branched = api.get(f"/conversations/{conversation['id']}", cast_to=object)
    assert branched["messages"][-2]["sibling_ids"] == [stored["messages"][-2]["id"], branched["messages"][-2]["id"]]

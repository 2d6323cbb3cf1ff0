"""Chat completions through the real gateway and real SmolLM2 workers, with the `openai` SDK as the client."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any

import httpx
import openai
import pytest

from shared import metric_names as names
from tests.conftest import Stack
from tests.support.prom import labelled, sample

pytestmark = pytest.mark.slow


def client(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=key, max_retries=0)


def aclient(stack: Stack, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{stack.gateway_url}/v1", api_key=key, max_retries=0, timeout=300)


def prompt_len(tokenizer: Any, messages: list[dict[str, str]]) -> int:
    return len(tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"])


def completion_len(tokenizer: Any, text: str, finish_reason: str) -> int:
    # Usage counts the end-of-sequence token too (as vLLM does); re-encoding the text cannot see it.
    return len(tokenizer.encode(text, add_special_tokens=False)) + (1 if finish_reason == "stop" else 0)


def test_non_streaming_returns_model_text_and_exact_usage(stack: Stack, plus_key: str, tokenizer: Any) -> None:
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    reply = client(stack, plus_key).chat.completions.create(
        model="mini", messages=messages, max_tokens=24, temperature=0
    )
    text = reply.choices[0].message.content or ""
    assert text.strip(), "the model produced no text"
    assert reply.model == "mini"
    assert reply.choices[0].finish_reason in {"stop", "length"}
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == prompt_len(tokenizer, messages)
    assert reply.usage.completion_tokens == completion_len(tokenizer, text, reply.choices[0].finish_reason)
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_streaming_ends_with_usage_then_done(stack: Stack, plus_key: str, tokenizer: Any) -> None:
    messages = [{"role": "user", "content": "Name three colours."}]
    stream = client(stack, plus_key).chat.completions.create(
        model="flagship",
        messages=messages,
        max_tokens=20,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text.strip()
    assert len(finish) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage is not None, "the last chunk must carry usage"
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-1].usage.prompt_tokens == prompt_len(tokenizer, messages)
    assert chunks[-1].usage.completion_tokens == completion_len(tokenizer, text, finish[0])

    # On the wire: the usage chunk is followed by exactly `data: [DONE]`.
    body = {"model": "mini", "messages": messages, "max_tokens": 5, "stream": True}
    body["stream_options"] = {"include_usage": True}
    raw = httpx.post(
        f"{stack.gateway_url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {plus_key}"},
        timeout=120,
    )
    # Each event's first line is its `id:` (resumable streams); the rest is the event.
    events = [e.split("\n", 1)[1] for e in raw.text.split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-2].removeprefix("data: "))["usage"]["completion_tokens"] >= 1


def test_stream_without_include_usage_has_no_usage_chunk(stack: Stack, plus_key: str) -> None:
    chunks = list(
        client(stack, plus_key).chat.completions.create(
            model="mini", messages=[{"role": "user", "content": "Hi"}], max_tokens=4, stream=True
        )
    )
    assert chunks and all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)


def test_shared_system_prompt_hits_the_prefix_cache(stack: Stack, plus_key: str) -> None:
    worker = stack.worker_urls["mini"][0]
    system = f"Session {uuid.uuid4()}. " + "You are a careful assistant who answers briefly and politely. " * 50
    api = client(stack, plus_key)
    first = api.chat.completions.create(
        model="mini",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "What is 2+2?"}],
        max_tokens=4,
    )
    hits_before = sample(worker, names.counter_sample(names.PREFIX_CACHE_HITS))
    second = api.chat.completions.create(
        model="mini",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "Name a fruit."}],
        max_tokens=4,
    )
    hits_after = sample(worker, names.counter_sample(names.PREFIX_CACHE_HITS))
    assert first.usage and second.usage and second.usage.prompt_tokens_details
    cached = second.usage.prompt_tokens_details.cached_tokens or 0
    shared_prefix = first.usage.prompt_tokens - 20  # the system turn; the user turns differ after it
    assert cached >= 0.9 * shared_prefix, f"only {cached} of ~{shared_prefix} shared tokens came from the cache"
    assert hits_after - hits_before == cached


def test_eight_concurrent_streams_are_batched(stack: Stack, plus_key: str) -> None:
    worker = stack.worker_urls["mini"][0]
    peak_running = 0.0
    stop = threading.Event()

    def watch() -> None:
        nonlocal peak_running
        while not stop.is_set():
            peak_running = max(peak_running, sample(worker, names.NUM_REQUESTS_RUNNING))
            time.sleep(0.05)

    async def one(i: int) -> tuple[str, int]:
        stream = await aclient(stack, plus_key).chat.completions.create(
            model="mini",
            messages=[{"role": "user", "content": f"Write a sentence about the number {i}."}],
            max_tokens=24,
            stream=True,
            stream_options={"include_usage": True},
        )
        text, completion = "", 0
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            if chunk.usage:
                completion = chunk.usage.completion_tokens
        return text, completion

    async def all_eight() -> list[tuple[str, int]]:
        return await asyncio.gather(*(one(i) for i in range(8)))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        results = asyncio.run(all_eight())
    finally:
        stop.set()
        watcher.join()
    assert len(results) == 8
    assert all(text.strip() and completion > 0 for text, completion in results)
    assert peak_running > 1, "the worker never ran more than one request at a time"


def test_client_disconnect_aborts_generation(stack: Stack, plus_key: str) -> None:
    worker = stack.worker_urls["mini"][0]
    aborted_before = labelled(worker, names.counter_sample(names.REQUEST_SUCCESS), finished_reason="abort")
    body = {
        "model": "mini",
        "messages": [{"role": "user", "content": "Write a very long story about a dragon and a knight."}],
        "max_tokens": 2000,
        "stream": True,
    }
    headers = {"authorization": f"Bearer {plus_key}"}
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", f"{stack.gateway_url}/v1/chat/completions", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        seen = 0
        for line in response.iter_lines():
            if line.startswith("data: {"):
                seen += 1
            if seen >= 4:
                break  # leave mid-stream: closing the response drops the connection
    # A client that did not ask for a resumable stream (the SDKs' case) stops its answer by leaving, as with OpenAI.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        aborted = labelled(worker, names.counter_sample(names.REQUEST_SUCCESS), finished_reason="abort")
        if aborted > aborted_before and sample(worker, names.NUM_REQUESTS_RUNNING) == 0:
            break
        time.sleep(0.2)
    assert aborted > aborted_before, "the worker kept generating for a client that left"
    assert sample(worker, names.NUM_REQUESTS_RUNNING) == 0

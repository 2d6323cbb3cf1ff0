"""Mid-stream continuation with the real model: two SmolLM2 workers (`fleetchat worker`) serve one pool, the one
streaming an answer is killed with SIGKILL, and the other continues the same answer from the partial text."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from functions.control.routing import HashRing
from tests.integration.conftest import GatewayFactory
from tests.support.processes import ProcessGroup, free_port, start_worker

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "Describe a quiet morning in a small fishing village, in a few sentences."}]
MAX_TOKENS = 48
KILL_AFTER_CHUNKS = 10


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ProcessGroup]:
    procs = ProcessGroup(tmp_path / "logs")
    yield procs
    procs.stop()


def _generated_tokens(worker: str) -> float:
    text = httpx.get(f"{worker}/metrics", timeout=10).text
    match = re.search(r'^vllm:generation_tokens_total\{model_name="mini"\} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_killed_worker_mid_stream_the_other_continues_the_same_answer(
    gateway_for: GatewayFactory, group: ProcessGroup
) -> None:
    starting = [start_worker(group, "mini", free_port(), kv_cache_tokens=4096) for _ in range(2)]
    replicas = [w.wait() for w in starting]
    victim, survivor = starting[0], replicas[1]
    session = next(f"s{i}" for i in range(1000) if next(HashRing(replicas).candidates(f"s{i}")) == replicas[0])
    # The uninterrupted greedy answer, from the replica that will continue it.
    reference = httpx.post(
        f"{survivor}/v1/chat/completions",
        json={"model": "mini", "messages": MESSAGES, "max_tokens": MAX_TOKENS, "temperature": 0},
        timeout=300,
    ).json()
    expected = reference["choices"][0]["message"]["content"]
    before = _generated_tokens(survivor)

    gw = gateway_for({"mini": replicas, "flagship": [survivor]})
    body = {
        "model": "mini",
        "messages": MESSAGES,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events: list[str] = []
    seen_before_kill = ""
    with httpx.stream(
        "POST",
        f"{gw.url}/v1/chat/completions",
        json=body,
        headers={**gw.headers(), "x-session-id": session},
        timeout=300,
    ) as response:
        assert response.status_code == 200
        content_chunks = 0
        for line in response.iter_lines():
            if not line.strip():
                continue
            events.append(line)
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line.removeprefix("data: "))
            delta = chunk["choices"][0]["delta"].get("content") if chunk["choices"] else None
            if delta and victim.proc.poll() is None:
                content_chunks += 1
                seen_before_kill += delta
                if content_chunks == KILL_AFTER_CHUNKS:
                    victim.proc.kill()  # SIGKILL, mid-answer
    assert victim.proc.wait(timeout=10) == -9
    assert events.count("data: [DONE]") == 1 and events[-1] == "data: [DONE]"
    assert not any(e.startswith("event: error") for e in events)
    chunks = [json.loads(e.removeprefix("data: ")) for e in events if e.startswith("data: {")]
    assert len({c["id"] for c in chunks}) == 1 and len({c["created"] for c in chunks}) == 1
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.startswith(seen_before_kill) and len(text) > len(seen_before_kill)
    # Coherent: the second leg went on where the first stopped (greedy decoding gives the uninterrupted answer's
    # next words), rather than starting over or repeating the partial text.
    assert text[: len(seen_before_kill) + 20] == expected[: len(seen_before_kill) + 20], (text, expected)
    assert text.count(seen_before_kill) == 1
    usage = next(c["usage"] for c in reversed(chunks) if c.get("usage"))
    second_leg = _generated_tokens(survivor) - before
    first_leg = usage["completion_tokens"] - second_leg
    # What the gateway had received from the killed worker (a few chunks may have been in flight to the client).
    assert KILL_AFTER_CHUNKS <= first_leg <= KILL_AFTER_CHUNKS + 8
    assert usage["completion_tokens"] <= MAX_TOKENS  # the continuation got only the budget left
    assert usage["prompt_tokens"] == reference["usage"]["prompt_tokens"]  # the first leg's prompt, counted once
    metrics = httpx.get(f"{gw.url}/metrics", timeout=10).text
    ttft = re.search(r'^fleetchat_gateway_continuation_ttft_seconds_sum\{pool="mini"\} (\S+)$', metrics, re.MULTILINE)
    assert ttft is not None and 'fleetchat_gateway_continuations_total{outcome="continued",pool="mini"} 1.0' in metrics
    print(f"continuation second-leg TTFT: {float(ttft.group(1)):.3f} s")  # the overhead `make bench` reports

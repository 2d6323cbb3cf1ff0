"""Failover with real worker processes on loopback: a replica killed (SIGKILL) mid-stream, one that stalls before or
during its answer, and a pool where nothing can continue. The workers are scripted processes
(tests/support/stand_ins/continuing_worker.py) that honour `continue_final_message`; the gateway is the real app."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from functions.control.routing import HashRing
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.processes import ProcessGroup, free_port
from tests.support.servers import serve
from tests.support.stand_ins.continuing_worker import start_continuing_worker, tokens
from tests.support.stand_ins.stand_in import stand_in_worker

SCRIPT = (
    "The lighthouse keeper climbed the spiral stairs at dusk, trimmed the wick, polished the great lens until it "
    "shone, and watched the first beam sweep across the dark water toward the ships still out at sea."
)
WORDS = len(tokens(SCRIPT))


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ProcessGroup]:
    procs = ProcessGroup(tmp_path / "logs")
    yield procs
    procs.stop()


def _session_owned_by(replicas: list[str], owner: str) -> str:
    """A session id whose consistent-hash owner is `owner` (so the first leg lands there)."""
    ring = HashRing(replicas)
    return next(f"s{i}" for i in range(1000) if next(ring.candidates(f"s{i}")) == owner)


def _events(gw: Gateway, model: str, session: str, **extra: object) -> tuple[httpx.Response, list[str]]:
    body = {"model": model, "messages": [{"role": "user", "content": "Tell me about lighthouses."}], "stream": True}
    response = httpx.post(
        f"{gw.url}/v1/chat/completions",
        json={**body, **extra},
        headers={**gw.headers(), "x-session-id": session},
        timeout=60,
    )
    # Each event's first line is its `id:` (resumable streams); the rest is the event.
    return response, [e.split("\n", 1)[1] for e in response.text.split("\n\n") if e.strip()]


def _ledger(data_dir: Path, request_id: str) -> sqlite3.Row:
    deadline = time.monotonic() + 10
    while True:
        db = sqlite3.connect(data_dir / "fleetchat.db")
        db.row_factory = sqlite3.Row
        try:
            row = db.execute("SELECT * FROM ledger WHERE request_id = ?", (request_id,)).fetchone()
        finally:
            db.close()
        if row is not None or time.monotonic() > deadline:
            assert row is not None, "the request never reached the ledger"
            return row
        time.sleep(0.1)


def _metric(gw: Gateway, line_start: str) -> float:
    text = httpx.get(f"{gw.url}/metrics", timeout=10).text
    found = [line for line in text.splitlines() if line.startswith(line_start)]
    return float(found[0].rsplit(" ", 1)[1]) if found else 0.0


def _bodies(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_replica_killed_mid_stream_is_continued_on_the_other(
    gateway_for: GatewayFactory, group: ProcessGroup, tmp_path: Path
) -> None:
    dying = start_continuing_worker(group, free_port(), SCRIPT, "--die-after", "7", "--log", str(tmp_path / "a.jsonl"))
    other = start_continuing_worker(group, free_port(), SCRIPT, "--log", str(tmp_path / "b.jsonl"))
    replicas = [dying.wait(), other.wait()]
    gw = gateway_for({"mini": replicas, "flagship": [replicas[1]]})
    session = _session_owned_by(replicas, replicas[0])
    api = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)
    raw = api.chat.completions.with_raw_response.create(
        model="mini",
        messages=[{"role": "user", "content": "Tell me about lighthouses."}],
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"store": True},
        extra_headers={"x-session-id": session},
    )
    chunks = list(raw.parse())
    assert dying.proc.wait(timeout=10) == -9, "the first replica was killed mid-stream"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == SCRIPT  # the second leg went on from the partial answer: nothing lost, nothing repeated
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1
    assert {c.model for c in chunks} == {"mini"}
    usage = next(c.usage for c in reversed(chunks) if c.usage is not None)  # the conversation chunk comes last
    assert usage.completion_tokens == WORDS  # 7 on the first leg + the rest on the second
    first_leg, second_leg = _bodies(tmp_path / "a.jsonl"), _bodies(tmp_path / "b.jsonl")
    assert len(first_leg) == 1 and len(second_leg) == 1
    assert usage.prompt_tokens == len(tokens(" ".join(m["content"] for m in first_leg[0]["messages"])))
    continued = second_leg[0]
    assert continued["continue_final_message"] is True and continued["add_generation_prompt"] is False
    assert continued["messages"][:-1] == first_leg[0]["messages"]
    assert continued["messages"][-1] == {"role": "assistant", "content": "".join(tokens(SCRIPT)[:7])}
    # Billed once, for what was generated across both legs; the stored turn is the whole answer.
    row = _ledger(gw.data_dir, raw.headers["x-request-id"])
    assert (row["outcome"], row["completion_tokens"], row["prompt_tokens"]) == ("completed", WORDS, usage.prompt_tokens)
    conversation = httpx.get(
        f"{gw.url}/v1/conversations/{raw.headers['x-conversation-id']}", headers=gw.headers(), timeout=10
    ).json()
    assert conversation["messages"][-1]["content"] == SCRIPT
    assert _metric(gw, 'fleetchat_gateway_continuations_total{outcome="continued",pool="mini"}') == 1
    assert _metric(gw, 'fleetchat_gateway_continuation_ttft_seconds_count{pool="mini"}') == 1
    ttft = _metric(gw, 'fleetchat_gateway_continuation_ttft_seconds_sum{pool="mini"}')
    print(f"continuation second-leg TTFT (scripted worker, 20 ms per token): {ttft:.3f} s")


def test_one_done_and_an_announced_fallback_pool_when_the_pool_has_no_other_replica(
    gateway_for: GatewayFactory, group: ProcessGroup
) -> None:
    dying = start_continuing_worker(group, free_port(), SCRIPT, "--die-after", "4")
    mini = start_continuing_worker(group, free_port(), SCRIPT)
    gw = gateway_for({"flagship": [dying.wait()], "mini": [mini.wait()]})
    options = {"include_usage": True}
    response, events = _events(gw, "flagship", "s1", max_tokens=12, stream_options=options)
    assert response.status_code == 200
    assert events.count("data: [DONE]") == 1 and events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events if e.startswith("data: {")]
    assert not any(e.startswith("event: error") for e in events)
    assert len({c["id"] for c in chunks}) == 1 and {c["model"] for c in chunks} == {"flagship"}
    announced = [c["continuation"] for c in chunks if "continuation" in c]
    assert announced == [{"pool": "mini", "fallback": True}]  # in-band: the headers went out with the first leg
    # The second leg got the budget left (12 - 4): the answer is as long as the client asked, no longer.
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "".join(tokens(SCRIPT)[:12])
    assert chunks[-1]["usage"]["completion_tokens"] == 12
    assert _metric(gw, 'fleetchat_gateway_continuations_total{outcome="fallback",pool="flagship"}') == 1


def test_nothing_can_continue_ends_with_an_error_event_and_keeps_the_partial_answer(
    gateway_for: GatewayFactory, group: ProcessGroup
) -> None:
    dying = start_continuing_worker(group, free_port(), SCRIPT, "--die-after", "5")
    url = dying.wait()
    gw = gateway_for({"mini": [url], "flagship": [url]})  # mini is the plus tier's last pool: no fallback
    response, events = _events(gw, "mini", "s1", store=True)
    # The error event, then (a conversation turn) the chunk saying the partial answer was stored, then [DONE].
    assert events[-3].startswith("event: error\ndata: ") and "stopped before finishing" in events[-3]
    assert json.loads(events[-2].removeprefix("data: "))["conversation"]["stored"] is True
    assert events[-1] == "data: [DONE]" and events.count("data: [DONE]") == 1
    partial = "".join(tokens(SCRIPT)[:5])
    row = _ledger(gw.data_dir, response.headers["x-request-id"])
    assert (row["outcome"], row["completion_tokens"]) == ("aborted", 5)  # billed once, for what was generated
    stored = httpx.get(
        f"{gw.url}/v1/conversations/{response.headers['x-conversation-id']}", headers=gw.headers(), timeout=10
    ).json()
    assert [(m["content"], m["finish_reason"]) for m in stored["messages"][-1:]] == [(partial, "error")]
    assert _metric(gw, 'fleetchat_gateway_continuations_total{outcome="failed",pool="mini"}') == 1


def test_a_stalled_worker_trips_its_breaker_and_a_half_open_probe_closes_it(
    gateway_for: GatewayFactory, group: ProcessGroup, tmp_path: Path
) -> None:
    stall, log = tmp_path / "stalled", tmp_path / "stalled.jsonl"
    stall.touch()
    stalled = start_continuing_worker(group, free_port(), SCRIPT, "--stall-file", str(stall), "--log", str(log))
    healthy = start_continuing_worker(group, free_port(), SCRIPT)
    replicas = [stalled.wait(), healthy.wait()]
    gw = gateway_for(
        {"mini": replicas, "flagship": [replicas[1]]},
        worker={"first_byte_timeout_s": 0.5},
        breaker={"failure_threshold": 2, "cooldown_s": 8.0},
        upstream={"backoff_s": 0.01},
    )
    session = _session_owned_by(replicas, replicas[0])
    for attempt in range(4):  # two first-byte timeouts open the breaker; the next requests skip the stalled replica
        response, events = _events(gw, "mini", session)
        assert response.status_code == 200 and events[-1] == "data: [DONE]"
        if attempt == 1:
            assert _metric(gw, 'fleetchat_gateway_breaker_state{pool="mini",replica="0"}') == 2
    assert len(_bodies(log)) == 2, "the open breaker kept requests away from the stalled replica"
    assert _metric(gw, 'fleetchat_gateway_upstream_retries_total{pool="mini"}') == 2
    stall.unlink()  # the worker recovers; after the cool-down one probe goes to it and closes the breaker
    deadline = time.monotonic() + 30
    while _metric(gw, 'fleetchat_gateway_breaker_state{pool="mini",replica="0"}') != 1:
        assert time.monotonic() < deadline, "the breaker never went half-open"
        time.sleep(0.2)
    response, events = _events(gw, "mini", session)
    assert response.status_code == 200 and len(_bodies(log)) == 3  # the probe, answered by the recovered replica
    assert _metric(gw, 'fleetchat_gateway_breaker_state{pool="mini",replica="0"}') == 0


def test_a_worker_stalling_mid_stream_is_continued_after_the_inter_chunk_timeout(
    gateway_for: GatewayFactory, group: ProcessGroup
) -> None:
    stalling = start_continuing_worker(group, free_port(), SCRIPT, "--stall-after", "6")
    other = start_continuing_worker(group, free_port(), SCRIPT)
    replicas = [stalling.wait(), other.wait()]
    gw = gateway_for(
        {"mini": replicas, "flagship": [replicas[1]]},
        worker={"inter_chunk_timeout_s": 0.5},
    )
    api = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)
    stream = api.chat.completions.create(
        model="mini",
        messages=[{"role": "user", "content": "Tell me about lighthouses."}],
        stream=True,
        extra_headers={"x-session-id": _session_owned_by(replicas, replicas[0])},
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == SCRIPT


def test_a_5xx_without_an_error_body_is_retried_on_the_next_replica(gateway_for: GatewayFactory) -> None:
    calls = {"n": 0}
    proxy = FastAPI()

    @proxy.post("/v1/chat/completions")
    async def bad_gateway() -> PlainTextResponse:
        calls["n"] += 1
        return PlainTextResponse("<html>502 Bad Gateway</html>", status_code=502)

    with serve(proxy) as broken, serve(stand_in_worker("alive")) as alive:
        gw = gateway_for({"mini": [broken, alive], "flagship": [alive]})
        api = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)
        reply = api.chat.completions.create(
            model="mini",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-session-id": _session_owned_by([broken, alive], broken)},
        )
        assert reply.choices[0].message.content == "alive" and calls["n"] == 1
        assert _metric(gw, 'fleetchat_gateway_upstream_retries_total{pool="mini"}') == 1

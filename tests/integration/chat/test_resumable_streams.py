"""Reconnecting to a chat stream over real HTTP: a client that drops mid-answer resumes with `Last-Event-ID` and gets
exactly the missing events then [DONE]; the answer kept generating meanwhile, is stored whole and billed once; a
drop nobody resumes is aborted after the grace period; an explicit cancel stops at once; another tenant's response
is a 404. The last test drops and resumes a real model's stream across real processes."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from functions.chat.streams.resumable import RESUMABLE_HEADER
from shared.fleet.tiers import Tier
from tests.conftest import Stack
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import PROMPT_TOKENS, scripted_worker

SCRIPT = "Porto in two days: the Ribeira and a port cellar first, then the Serralves gardens and the sea. " * 2
PIECES = -(-len(SCRIPT) // 4)  # the scripted worker sends 4 characters per chunk


@dataclass
class Read:
    """What one connection received: (event id, event type, data) in order."""

    events: list[tuple[int, str, str]] = field(default_factory=list)

    @property
    def ids(self) -> list[int]:
        return [i for i, _, _ in self.events]

    @property
    def text(self) -> str:
        return "".join(
            choice["delta"].get("content") or ""
            for chunk in self.chunks()
            for choice in chunk.get("choices") or []
            if choice.get("delta")
        )

    def chunks(self) -> list[dict]:
        return [json.loads(data) for _, kind, data in self.events if kind == "message" and data != "[DONE]"]

    @property
    def done(self) -> bool:
        return bool(self.events) and self.events[-1][2] == "[DONE]"


def _read(response: httpx.Response, *, stop_after_content: int | None = None) -> Read:
    """Parse SSE events (id, event, data) off a raw response; leave after `stop_after_content` content chunks."""
    read, event_id, kind, data, content = Read(), None, "message", [], 0
    for line in response.iter_lines():
        if line.startswith("id: "):
            event_id = int(line[4:])
        elif line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and data:
            assert event_id is not None, "an event without an id"
            read.events.append((event_id, kind, "\n".join(data)))
            if '"content":"' in data[0] and '"content":""' not in data[0]:
                content += 1
            event_id, kind, data = None, "message", []
            if read.done or (stop_after_content is not None and content >= stop_after_content):
                return read
    return read


def _body(**extra: object) -> dict:
    return {
        "model": "mini",
        "messages": [{"role": "user", "content": "Two days in Porto?"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }


def _conversation(gateway: Gateway, conversation_id: str) -> dict:
    response = httpx.get(f"{gateway.url}/v1/conversations/{conversation_id}", headers=gateway.headers())
    response.raise_for_status()
    return response.json()


def _stored_messages(gateway: Gateway, conversation_id: str) -> int:
    """How many messages the conversation holds (0 before its first turn is saved: a new one does not exist yet)."""
    response = httpx.get(f"{gateway.url}/v1/conversations/{conversation_id}", headers=gateway.headers())
    return 0 if response.status_code == 404 else response.json()["message_count"]


def _ledger(gateway: Gateway) -> list[sqlite3.Row]:
    db = sqlite3.connect(gateway.data_dir / "fleetchat.db")
    db.row_factory = sqlite3.Row
    try:
        return db.execute("SELECT * FROM ledger ORDER BY created_at").fetchall()
    finally:
        db.close()


def _wait_for(check: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def slow_worker() -> Iterator[tuple[str, object]]:
    worker = scripted_worker(SCRIPT, delay_s=0.03)
    with serve(worker) as url:
        yield url, worker


def _resumable(headers: dict[str, str]) -> dict[str, str]:
    """Ask that a drop not stop the answer (what the web chat asks; an SDK client's drop stops it)."""
    return {**headers, RESUMABLE_HEADER: "true"}


def _drop_half_way(gateway: Gateway) -> tuple[Read, str, str]:
    """Read about half the answer, then close the connection: (what was read, completion id, conversation id)."""
    with (
        httpx.Client(timeout=30) as http,
        http.stream(
            "POST", f"{gateway.url}/v1/chat/completions", json=_body(store=True), headers=_resumable(gateway.headers())
        ) as response,
    ):
        assert response.status_code == 200
        first = _read(response, stop_after_content=PIECES // 2)
        conversation_id = response.headers["x-conversation-id"]
    assert not first.done
    return first, first.chunks()[0]["id"], conversation_id


def test_a_dropped_stream_resumes_with_exactly_the_missing_events(
    gateway_for: GatewayFactory, slow_worker: tuple[str, object]
) -> None:
    url, worker = slow_worker
    gateway = gateway_for({"mini": [url]})
    first, completion_id, conversation_id = _drop_half_way(gateway)
    assert first.ids == list(range(1, len(first.ids) + 1))  # numbered from 1, one by one

    headers = {**gateway.headers(), "Last-Event-ID": str(first.ids[-1])}
    with (
        httpx.Client(timeout=30) as http,
        http.stream("GET", f"{gateway.url}/v1/chat/completions/{completion_id}/stream", headers=headers) as response,
    ):
        assert response.status_code == 200
        assert response.headers["x-conversation-id"] == conversation_id
        rest = _read(response)
    assert rest.done
    assert rest.ids == list(range(first.ids[-1] + 1, first.ids[-1] + 1 + len(rest.ids)))  # exactly the missing ones
    assert first.text + rest.text == SCRIPT
    # One usage chunk, one conversation chunk over both connections.
    chunks = first.chunks() + rest.chunks()
    assert [c["usage"]["completion_tokens"] for c in chunks if c.get("usage")] == [PIECES]
    conversation = [c["conversation"] for c in chunks if "conversation" in c]
    assert len(conversation) == 1 and conversation[0]["stored"] is True

    answer = _conversation(gateway, conversation_id)["messages"][-1]
    assert answer["content"] == SCRIPT and answer["finish_reason"] == "stop"
    assert worker.state.streams[-1]["finished"] is True  # the generation went on while nobody was connected
    ledger = _ledger(gateway)
    assert len(ledger) == 1
    assert (ledger[0]["outcome"], ledger[0]["completion_tokens"]) == ("completed", PIECES)
    assert ledger[0]["prompt_tokens"] == PROMPT_TOKENS

    # After the end the buffer still replays (from the start without Last-Event-ID) until it expires.
    again = httpx.get(f"{gateway.url}/v1/chat/completions/{completion_id}/stream", headers=gateway.headers())
    assert again.status_code == 200 and again.text.endswith("data: [DONE]\n\n")
    assert len(_ledger(gateway)) == 1  # replaying bills nothing
    metrics = httpx.get(f"{gateway.url}/metrics").text
    assert 'fleetchat_gateway_stream_resumes_total{outcome="resumed"} 2.0' in metrics


def test_another_tenant_cannot_resume_or_cancel_and_bad_ids_change_nothing(
    gateway_for: GatewayFactory, slow_worker: tuple[str, object]
) -> None:
    url, _ = slow_worker
    gateway = gateway_for({"mini": [url]})
    _, completion_id, conversation_id = _drop_half_way(gateway)
    resume = f"{gateway.url}/v1/chat/completions/{completion_id}/stream"
    other = gateway.headers(gateway.other_key)
    for response in (
        httpx.get(resume, headers={**other, "Last-Event-ID": "1"}),
        httpx.post(f"{gateway.url}/v1/chat/completions/{completion_id}/cancel", headers=other),
        httpx.get(f"{gateway.url}/v1/chat/completions/chatcmpl-unknown/stream", headers=gateway.headers()),
    ):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "stream_not_found"
    for bad, code in (("abc", None), ("99999", "invalid_last_event_id")):
        response = httpx.get(resume, headers={**gateway.headers(), "Last-Event-ID": bad})
        assert response.status_code == 400 and response.json()["error"]["param"] == "Last-Event-ID"
        if code:
            assert response.json()["error"]["code"] == code
    # None of that stopped the answer: it is stored whole.
    _wait_for(lambda: _stored_messages(gateway, conversation_id) == 2)
    assert _conversation(gateway, conversation_id)["messages"][-1]["content"] == SCRIPT


def test_a_drop_nobody_resumes_is_aborted_after_the_grace_period(gateway_for: GatewayFactory) -> None:
    worker = scripted_worker(SCRIPT * 10, delay_s=0.03)  # ~15 s of answer: far longer than the grace period
    with serve(worker) as url:
        gateway = gateway_for(
            {"mini": [url]},
            resume={"grace_s": 0.5},
        )
        first, completion_id, conversation_id = _drop_half_way(gateway)
        _wait_for(lambda: _stored_messages(gateway, conversation_id) == 2)
        answer = _conversation(gateway, conversation_id)["messages"][-1]
        assert answer["finish_reason"] == "stopped"
        assert answer["content"].startswith(first.text) and len(answer["content"]) < len(SCRIPT * 10)
        assert worker.state.streams[-1]["finished"] is False
        [entry] = _ledger(gateway)
        assert entry["outcome"] == "aborted" and entry["completion_tokens"] >= PIECES // 2
        # A late resume gets what was generated and the stream's end: an error event that says it was stopped.
        headers = {**gateway.headers(), "Last-Event-ID": str(first.ids[-1])}
        with httpx.stream("GET", f"{gateway.url}/v1/chat/completions/{completion_id}/stream", headers=headers) as r:
            rest = _read(r)
        assert rest.done and rest.events[-2][1] == "error"
        assert json.loads(rest.events[-2][2])["error"]["code"] == "response_stopped"
        assert first.text + rest.text == answer["content"]


def test_cancel_stops_the_answer_at_once_and_keeps_it_as_stopped(
    gateway_for: GatewayFactory, slow_worker: tuple[str, object]
) -> None:
    url, worker = slow_worker
    gateway = gateway_for({"mini": [url]})  # the default grace period: only the cancel stops it this soon
    _, completion_id, conversation_id = _drop_half_way(gateway)
    cancel = f"{gateway.url}/v1/chat/completions/{completion_id}/cancel"
    response = httpx.post(cancel, headers=gateway.headers())
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    answer = _conversation(gateway, conversation_id)["messages"][-1]  # the books are closed when cancel answers
    assert answer["finish_reason"] == "stopped" and 0 < len(answer["content"]) < len(SCRIPT)
    assert worker.state.streams[-1]["finished"] is False
    assert [row["outcome"] for row in _ledger(gateway)] == ["aborted"]
    assert httpx.post(cancel, headers=gateway.headers()).json()["status"] == "ended"  # idempotent


def test_a_real_model_stream_resumed_from_another_connection_is_whole_and_billed_once(stack: Stack) -> None:
    """Against real processes (the gateway and SmolLM2 workers of `fleetchat`): drop after a few tokens, resume."""
    tenant_id, key = stack.new_tenant(Tier.PLUS, "resumer")
    headers = {"authorization": f"Bearer {key}"}
    body = {**_body(store=True), "max_tokens": 48, "temperature": 0}
    body["messages"] = [{"role": "user", "content": "Describe a lighthouse at night in three sentences."}]
    asked = _resumable(headers)
    with (
        httpx.Client(timeout=120) as http,
        http.stream("POST", f"{stack.gateway_url}/v1/chat/completions", json=body, headers=asked) as response,
    ):
        assert response.status_code == 200
        first = _read(response, stop_after_content=4)
        request_id, conversation_id = response.headers["x-request-id"], response.headers["x-conversation-id"]
    assert not first.done
    resume = {**headers, "Last-Event-ID": str(first.ids[-1])}
    with httpx.stream(
        "GET", f"{stack.gateway_url}/v1/chat/completions/{request_id}/stream", headers=resume, timeout=120
    ) as response:
        rest = _read(response)
    assert rest.done and rest.ids[0] == first.ids[-1] + 1
    stored = httpx.get(f"{stack.gateway_url}/v1/conversations/{conversation_id}", headers=headers).json()
    assert stored["messages"][-1]["content"] == first.text + rest.text
    [usage] = [c["usage"] for c in first.chunks() + rest.chunks() if c.get("usage")]
    db = sqlite3.connect(stack.data_dir / "fleetchat.db")
    try:
        rows = db.execute("SELECT completion_tokens, outcome FROM ledger WHERE tenant_id = ?", (tenant_id,)).fetchall()
    finally:
        db.close()
    assert rows == [(usage["completion_tokens"], "completed")]

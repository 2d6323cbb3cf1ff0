"""A Responses API stream survives the death of its gateway, over real processes: two gateways share the control
state; the one generating a resumable response is killed (kill -9) mid-answer; the client resumes on the other with
`GET /v1/responses/{id}?stream=true&starting_after=N` and gets exactly the events after N (the survivor took the answer
over and finished it), the response is stored whole with its record and billed once. A response whose first events
the buffer's bound dropped is a 410 to resume, never a stream that starts mid-answer; the chat Stop stops a response
by its id."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from tests.integration.chat.test_resumable_streams import _ledger, _resumable
from tests.integration.chat.test_resume_across_gateways import LONG, _gateway_processes
from tests.integration.conftest import GatewayFactory
from tests.support.prom import labelled
from tests.support.servers import serve
from tests.support.stand_ins.continuing_worker import continuing_worker, tokens
from tests.support.stand_ins.scripted_worker import scripted_worker


def _events(response: httpx.Response, *, stop_after_deltas: int | None = None) -> list[dict[str, Any]]:
    events, deltas = [], 0
    for line in response.iter_lines():
        if line.startswith("data: "):
            events.append(json.loads(line[6:]))
            deltas += events[-1]["type"] == "response.output_text.delta"
            if stop_after_deltas is not None and deltas >= stop_after_deltas:
                break
    return events


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def test_a_response_whose_gateway_was_killed_is_finished_by_another_and_resumed_by_sequence_number(
    tmp_path: Path,
) -> None:
    worker = continuing_worker(LONG, delay_s=0.12)  # about 4 s of answer, continued from any partial answer
    body = {"model": "mini", "input": "Tell me about the lighthouse.", "stream": True}
    with serve(worker) as url, _gateway_processes(tmp_path, url) as (a, kill_a, b):
        with (
            httpx.Client(timeout=30) as http,
            http.stream("POST", f"{a.url}/v1/responses", json=body, headers=_resumable(a.headers())) as response,
        ):
            assert response.status_code == 200
            first = _events(response, stop_after_deltas=3)
        response_id = first[0]["response"]["id"]
        time.sleep(0.3)  # the answer goes on unattended on a, then a is killed mid-answer
        kill_a()
        last_seen = first[-1]["sequence_number"]
        resume = f"{b.url}/v1/responses/{response_id}?stream=true&starting_after={last_seen}"
        with httpx.Client(timeout=30) as http, http.stream("GET", resume, headers=b.headers(a.key)) as response:
            assert response.status_code == 200, response.read()
            rest = _events(response)
        retrieved = httpx.get(f"{b.url}/v1/responses/{response_id}", headers=b.headers(a.key), timeout=30).json()
        took_over = labelled(b.url, "fleetchat_gateway_stream_takeovers_total", outcome="finished")
    assert took_over == 1
    assert [e["sequence_number"] for e in first + rest] == list(range(len(first) + len(rest)))  # no gap, no repeat
    assert _text(first) + _text(rest) == LONG  # no token missing, none repeated
    assert rest[-1]["type"] == "response.completed"
    done = rest[-1]["response"]
    assert done["output"][0]["content"][0]["text"] == LONG and done["usage"]["output_tokens"] == len(tokens(LONG))
    assert retrieved["output"][0]["content"][0]["text"] == LONG and retrieved["usage"] == done["usage"]
    ledger = _ledger(a)
    assert len(ledger) == 1 and ledger[0]["outcome"] == "completed"
    assert ledger[0]["completion_tokens"] == done["usage"]["output_tokens"]


def test_a_response_whose_first_events_were_dropped_cannot_be_resumed_exactly_and_says_so(
    gateway_for: GatewayFactory,
) -> None:
    """A response's events are remade from the buffer's start; when the buffer's byte bound dropped its start, a
    resume is a 410 (never a stream that starts mid-answer with the wrong sequence numbers)."""
    with serve(scripted_worker(LONG * 2, delay_s=0.01)) as url:  # about 100 events: far more than 1 KiB of them
        gateway = gateway_for({"mini": [url]}, resume={"response_max_bytes": 1024})
        body = {"model": "mini", "input": "Tell me about the lighthouse.", "stream": True}
        with (
            httpx.Client(timeout=30) as http,
            http.stream("POST", f"{gateway.url}/v1/responses", json=body, headers=gateway.headers()) as response,
        ):
            events = _events(response)
        assert events[-1]["type"] == "response.completed"
        resume = f"{gateway.url}/v1/responses/{events[0]['response']['id']}?stream=true&starting_after=2"
        gone = httpx.get(resume, headers=gateway.headers(), timeout=30)
    assert gone.status_code == 410 and gone.json()["error"]["code"] == "stream_events_expired"


def test_a_response_stream_is_stopped_by_its_response_id_and_kept_as_cancelled(gateway_for: GatewayFactory) -> None:
    """The chat Stop (`POST /v1/chat/completions/{id}/cancel`) takes a response id: generation stops, the partial
    answer is kept and billed, and the retrieved response says it was cancelled."""
    with serve(scripted_worker(LONG * 2, delay_s=0.05)) as url:
        gateway = gateway_for({"mini": [url]})
        body = {"model": "mini", "input": "Tell me about the lighthouse.", "stream": True}
        with (
            httpx.Client(timeout=30) as http,
            http.stream("POST", f"{gateway.url}/v1/responses", json=body, headers=gateway.headers()) as response,
        ):
            events = (json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: "))
            first = [next(events) for _ in range(6)]  # created, in_progress, the item and its part, two deltas
            response_id = first[0]["response"]["id"]
            stop = httpx.post(f"{gateway.url}/v1/chat/completions/{response_id}/cancel", headers=gateway.headers())
            rest = list(events)
        assert stop.status_code == 200 and stop.json()["status"] == "cancelled"
        assert rest and not any(e.get("type") == "response.completed" for e in rest)
        deadline = time.monotonic() + 10
        while (
            got := httpx.get(f"{gateway.url}/v1/responses/{response_id}", headers=gateway.headers())
        ).status_code != 200:
            assert time.monotonic() < deadline, got.text
            time.sleep(0.1)
    stored = got.json()
    assert stored["status"] == "cancelled"
    kept = stored["output"][0]["content"][0]["text"]
    assert kept and (LONG * 2).startswith(kept) and len(kept) < len(LONG * 2)
    assert [row["outcome"] for row in _ledger(gateway)] == ["aborted"]

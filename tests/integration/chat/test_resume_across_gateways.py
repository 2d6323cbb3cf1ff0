"""Resumable streams across gateway replicas, over real HTTP: two gateways on one data dir share the control state
(SQLite, `control.db`). A client that drops from the gateway generating its answer resumes on the other with
`Last-Event-ID` and gets exactly the missing events, the answer billed and stored once; reading it there keeps the
generating gateway from abandoning it; a Stop sent to the other gateway stops it; another tenant finds nothing. The last
test kills the generating gateway process (kill -9) mid-answer: the survivor takes the stream over and the client's
resume there gets the rest of the answer, billed and stored once; one killed after its answer's end, before it marked
the stream ended, is not answered twice."""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.integration.chat.test_resumable_streams import (
    PIECES,
    SCRIPT,
    Read,
    _body,
    _conversation,
    _ledger,
    _read,
    _resumable,
    _stored_messages,
)
from tests.integration.conftest import Gateway, GatewayFactory
from tests.integration.files.test_ingestion_crash import _owner
from tests.support.processes import ProcessGroup, free_port, start_gateway
from tests.support.prom import labelled
from tests.support.redis_server import redis_server
from tests.support.servers import serve
from tests.support.stand_ins.continuing_worker import continuing_worker, tokens
from tests.support.stand_ins.scripted_worker import scripted_worker

FAST_SYNC = {"sync_s": 0.2, "liveness_s": 1.0, "poll_s": 0.02}


@pytest.fixture
def slower_worker() -> Iterator[tuple[str, object]]:
    worker = scripted_worker(SCRIPT, delay_s=0.05)
    with serve(worker) as url:
        yield url, worker


def _two_gateways(
    gateway_for: GatewayFactory, url: str, control: dict[str, object] | None = None, **resume: float
) -> tuple[Gateway, Gateway]:
    settings: dict[str, object] = {"control_state": {**FAST_SYNC, **(control or {})}}
    if resume:
        settings["resume"] = resume
    return gateway_for({"mini": [url]}, **settings), gateway_for({"mini": [url]}, **settings)


@pytest.fixture(params=["sqlite", "redis"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, object]]:
    """The shared control state's engine: the data dir's SQLite file, or Debian's redis-server."""
    if request.param == "sqlite":
        yield {}
        return
    (tmp_path / "redis").mkdir()
    with redis_server(tmp_path / "redis") as redis_url:
        yield {"engine": "redis", "redis_url": redis_url}


def _drop_on(gateway: Gateway, pieces: int) -> tuple[Read, str, str]:
    with (
        httpx.Client(timeout=30) as http,
        http.stream(
            "POST", f"{gateway.url}/v1/chat/completions", json=_body(store=True), headers=_resumable(gateway.headers())
        ) as response,
    ):
        assert response.status_code == 200
        first = _read(response, stop_after_content=pieces)
        conversation_id = response.headers["x-conversation-id"]
    assert not first.done
    return first, first.chunks()[0]["id"], conversation_id


def _resume_on(gateway: Gateway, key_of: Gateway, name: str, after: int) -> tuple[httpx.Headers, Read]:
    headers = {**gateway.headers(key_of.key), "Last-Event-ID": str(after)}
    with (
        httpx.Client(timeout=30) as http,
        http.stream("GET", f"{gateway.url}/v1/chat/completions/{name}/stream", headers=headers) as response,
    ):
        assert response.status_code == 200, response.read()
        return response.headers, _read(response)


def test_a_stream_dropped_on_one_gateway_resumes_on_another_with_exactly_the_missing_events(
    gateway_for: GatewayFactory, slower_worker: tuple[str, object], engine: dict[str, object]
) -> None:
    url, worker = slower_worker
    a, b = _two_gateways(gateway_for, url, engine)
    first, completion_id, conversation_id = _drop_on(a, PIECES // 3)
    headers, rest = _resume_on(b, a, completion_id, first.ids[-1])
    assert headers["x-conversation-id"] == conversation_id
    assert rest.done
    assert rest.ids == list(range(first.ids[-1] + 1, first.ids[-1] + 1 + len(rest.ids)))  # no gap, no repeat
    assert first.text + rest.text == SCRIPT
    chunks = first.chunks() + rest.chunks()
    assert [c["usage"]["completion_tokens"] for c in chunks if c.get("usage")] == [PIECES]  # billed once
    assert _conversation(a, conversation_id)["messages"][-1]["content"] == SCRIPT
    assert worker.state.streams[-1]["finished"] is True
    assert [row["outcome"] for row in _ledger(a)] == ["completed"]
    metrics = httpx.get(f"{b.url}/metrics").text
    assert 'fleetchat_gateway_stream_resumes_total{outcome="resumed_elsewhere"} 1.0' in metrics

    # Ended, it replays from any gateway until it expires (by its request id too), billing nothing more.
    _, again = _resume_on(b, a, completion_id, 0)
    assert again.done and again.text == SCRIPT
    assert len(_ledger(a)) == 1


def test_reading_on_another_gateway_keeps_the_answer_generating_past_the_grace_period(
    gateway_for: GatewayFactory, slower_worker: tuple[str, object]
) -> None:
    url, worker = slower_worker
    a, b = _two_gateways(gateway_for, url, grace_s=0.3)
    first, completion_id, _ = _drop_on(a, 3)  # the answer has about 2 s to go; the grace is 0.3 s
    _, rest = _resume_on(b, a, completion_id, first.ids[-1])
    assert rest.done and first.text + rest.text == SCRIPT
    assert worker.state.streams[-1]["finished"] is True
    assert [row["outcome"] for row in _ledger(a)] == ["completed"]


def test_a_stop_sent_to_another_gateway_stops_the_answer_where_it_generates(
    gateway_for: GatewayFactory, slower_worker: tuple[str, object]
) -> None:
    url, worker = slower_worker
    a, b = _two_gateways(gateway_for, url, grace_s=30)
    first, completion_id, conversation_id = _drop_on(a, 3)
    started = time.monotonic()
    stop = httpx.post(f"{b.url}/v1/chat/completions/{completion_id}/cancel", headers=b.headers(a.key), timeout=30)
    assert stop.status_code == 200 and stop.json()["status"] == "cancelled"
    assert time.monotonic() - started < 2.0  # within a few sync rounds (0.2 s each here)
    _, rest = _resume_on(b, a, completion_id, first.ids[-1])
    assert rest.done and '"response_stopped"' in rest.events[-2][2]
    assert worker.state.streams[-1]["finished"] is False
    stored = _conversation(a, conversation_id)["messages"][-1]
    assert stored["finish_reason"] == "stopped" and SCRIPT.startswith(stored["content"])
    assert [row["outcome"] for row in _ledger(a)] == ["aborted"]  # as a Stop on its own gateway is


def test_another_tenant_finds_nothing_on_any_gateway(
    gateway_for: GatewayFactory, slower_worker: tuple[str, object]
) -> None:
    url, _ = slower_worker
    a, b = _two_gateways(gateway_for, url)
    _, completion_id, _ = _drop_on(a, 3)
    other = b.headers(a.other_key)
    for response in (
        httpx.get(f"{b.url}/v1/chat/completions/{completion_id}/stream", headers={**other, "Last-Event-ID": "1"}),
        httpx.post(f"{b.url}/v1/chat/completions/{completion_id}/cancel", headers=other),
    ):
        assert response.status_code == 404 and response.json()["error"]["code"] == "stream_not_found"


LONG = (
    "The lighthouse keeper climbed the spiral stairs at dusk, trimmed the wick, polished the great lens until it "
    "shone, and watched the first beam sweep across the dark water toward the ships still out at sea."
)


@contextmanager
def _gateway_processes(tmp_path: Path, url: str) -> Iterator[tuple[Gateway, Callable[[], None], Gateway]]:
    """Two gateway processes on one data dir over the worker at `url`, quick to notice a silent gateway; yields the
    first, a `kill -9` of the first (returns once it is dead), and the second."""
    data = tmp_path / "data"
    _, key = _owner(data)
    group = ProcessGroup(tmp_path / "logs")
    env = {"FLEETCHAT_CONTROL_STATE_SYNC_S": "0.2", "FLEETCHAT_CONTROL_STATE_LIVENESS_S": "1.0"}
    try:
        a = Gateway(start_gateway(group, data, {"mini": [url]}, free_port(), env), key, key, data)
        owner = group.procs[-1]
        b = Gateway(start_gateway(group, data, {"mini": [url]}, free_port(), env), key, key, data)

        def kill_a() -> None:
            owner.send_signal(signal.SIGKILL)
            owner.wait(timeout=30)

        yield a, kill_a, b
    finally:
        group.stop()


def _stored_eventually(gateway: Gateway, conversation_id: str, why: str) -> dict:
    """The conversation's last message once its first turn is stored (a new conversation exists only then)."""
    deadline = time.monotonic() + 30
    while _stored_messages(gateway, conversation_id) < 2:
        assert time.monotonic() < deadline, why
        time.sleep(0.2)
    return _conversation(gateway, conversation_id)["messages"][-1]


def test_when_the_generating_gateway_is_killed_another_finishes_the_answer_exactly_once(tmp_path: Path) -> None:
    worker = continuing_worker(LONG, delay_s=0.12)  # about 4 s of answer, continued from any partial answer
    with serve(worker) as url, _gateway_processes(tmp_path, url) as (a, kill_a, b):
        first, completion_id, conversation_id = _drop_on(a, 3)
        time.sleep(0.3)  # the answer goes on unattended on a, then a is killed mid-answer
        kill_a()
        _, rest = _resume_on(b, a, completion_id, first.ids[-1])
        stored = _conversation(b, conversation_id)["messages"][-1]
        took_over = labelled(b.url, "fleetchat_gateway_stream_takeovers_total", outcome="finished")
    assert took_over == 1
    assert rest.done and rest.ids == list(range(first.ids[-1] + 1, first.ids[-1] + 1 + len(rest.ids)))
    assert first.text + rest.text == LONG  # no token missing, none repeated
    chunks = first.chunks() + rest.chunks()
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert len(usage) == 1 and usage[0]["completion_tokens"] == len(tokens(LONG))
    assert stored["content"] == LONG and stored["finish_reason"] == "stop"
    ledger = _ledger(a)
    assert len(ledger) == 1 and ledger[0]["outcome"] == "completed"
    assert ledger[0]["completion_tokens"] == usage[0]["completion_tokens"]
    assert ledger[0]["prompt_tokens"] == usage[0]["prompt_tokens"]


def test_an_answer_whose_gateway_died_is_finished_and_stored_even_if_nobody_comes_back(tmp_path: Path) -> None:
    with serve(continuing_worker(LONG, delay_s=0.12)) as url, _gateway_processes(tmp_path, url) as (a, kill_a, b):
        _, _, conversation_id = _drop_on(a, 3)
        kill_a()
        stored = _stored_eventually(b, conversation_id, "the answer was never finished")
    assert stored["content"] == LONG and stored["finish_reason"] == "stop"
    assert [row["outcome"] for row in _ledger(a)] == ["completed"]


def test_when_no_replica_can_continue_a_taken_over_answer_its_books_still_close_once(tmp_path: Path) -> None:
    with contextlib.ExitStack() as gateways:
        with serve(continuing_worker(LONG, delay_s=0.12)) as url:
            a, kill_a, b = gateways.enter_context(_gateway_processes(tmp_path, url))
            first, completion_id, conversation_id = _drop_on(a, 3)
            kill_a()
        # The worker is gone too: the survivor takes the stream over and cannot continue it.
        _, rest = _resume_on(b, a, completion_id, first.ids[-1])
        stored = _conversation(b, conversation_id)["messages"][-1]
    assert rest.done and [kind for _, kind, _ in rest.events].count("error") == 1
    assert rest.chunks()[-1]["conversation"]["stored"] is True
    assert rest.ids == list(range(first.ids[-1] + 1, first.ids[-1] + 1 + len(rest.ids)))
    text = first.text + rest.text
    assert text and LONG.startswith(text)
    assert stored["content"] == text and stored["finish_reason"] == "error"  # the partial answer its client saw
    assert [row["outcome"] for row in _ledger(a)] == ["aborted"]  # billed once, for what was generated


def test_a_dead_gateways_answer_to_a_client_that_does_not_resume_is_billed_and_stored_as_stopped(
    tmp_path: Path,
) -> None:
    """The `openai` SDK does not resume: its connection closed with the killed gateway, which is a Stop. The survivor
    closes the books the dead one left open: billed once for what was generated, the partial answer stored."""
    with serve(continuing_worker(LONG, delay_s=0.12)) as url, _gateway_processes(tmp_path, url) as (a, kill_a, b):
        with (
            httpx.Client(timeout=30) as http,
            http.stream("POST", f"{a.url}/v1/chat/completions", json=_body(store=True), headers=a.headers()) as r,
        ):
            first = _read(r, stop_after_content=3)  # still connected: the answer goes on for this client
            conversation_id = r.headers["x-conversation-id"]
            kill_a()
        stored = _stored_eventually(b, conversation_id, "the dead gateway's books were never closed")
        closed = labelled(b.url, "fleetchat_gateway_stream_takeovers_total", outcome="closed")
    assert closed == 1
    assert stored["finish_reason"] == "stopped" and first.text and stored["content"].startswith(first.text)
    assert LONG.startswith(stored["content"])  # what was generated before the gateway died, nothing more
    ledger = _ledger(a)
    assert [row["outcome"] for row in ledger] == ["aborted"]
    assert ledger[0]["completion_tokens"] == len(tokens(stored["content"]))


def test_a_gateway_killed_after_its_answers_end_but_before_marking_it_ended_is_not_answered_twice(
    tmp_path: Path,
) -> None:
    """Its client had `[DONE]` (written to the shared log after the books closed) but the stream was still listed live:
    the survivor finds the end in the log, writes the missing mark, and bills and stores nothing again."""

    def streamed(gateway: Gateway, **extra: object) -> tuple[Read, httpx.Headers]:
        with (
            httpx.Client(timeout=30) as http,
            http.stream(
                "POST", f"{gateway.url}/v1/chat/completions", json=_body(**extra), headers=_resumable(gateway.headers())
            ) as response,
        ):
            return _read(response), response.headers

    with serve(continuing_worker(LONG, delay_s=0.01)) as url, _gateway_processes(tmp_path, url) as (a, kill_a, b):
        _, headers = streamed(a, store=True)
        conversation_id = headers["x-conversation-id"]
        second, _ = streamed(a, conversation_id=conversation_id)  # a second turn of the conversation
        assert second.done and second.text == LONG
        # The state a kill between the `[DONE]` write and the end mark leaves: not ended, listed live.
        control = sqlite3.connect(a.data_dir / "control.db")
        with control:
            stream_id, tenant_id, owner = control.execute(
                "SELECT s.stream_id, s.tenant_id, s.owner FROM streams s JOIN stream_names n USING (stream_id)"
                " WHERE n.name = ?",
                (second.chunks()[0]["id"],),
            ).fetchone()
            control.execute("UPDATE streams SET ended = 0 WHERE stream_id = ?", (stream_id,))
            control.execute(
                "INSERT OR REPLACE INTO records (namespace, key, value, expires_at)"
                " VALUES ('live-streams', ?, ?, NULL)",
                (stream_id, json.dumps({"owner": owner, "tenant": tenant_id})),
            )
        kill_a()
        deadline = time.monotonic() + 30
        while control.execute("SELECT ended FROM streams WHERE stream_id = ?", (stream_id,)).fetchone()[0] != 1:
            assert time.monotonic() < deadline, "the survivor never looked at the silent gateway's stream"
            time.sleep(0.2)
        control.close()
        time.sleep(0.5)  # anything a second answer would store or bill, it has by now
        messages = _conversation(b, conversation_id)["messages"]
        outcome = labelled(b.url, "fleetchat_gateway_stream_takeovers_total", outcome="ended")
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert [row["outcome"] for row in _ledger(a)] == ["completed", "completed"]
    assert outcome == 1

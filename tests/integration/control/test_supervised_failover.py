"""Issue 21's must-hold, end to end under supervision: `fleetchat up` with two replicas of a pool; `kill -9` of the one
streaming an answer. The client's stream completes (one id, one `[DONE]`, the whole answer, usage across both legs),
the ledger has the request once, the stored conversation holds the whole answer, and the supervisor restarts the
killed replica, which serves a request pinned to it again within 60 s.

The workers are scripted processes (tests/support/stand_ins/continuing_worker.py, run by `fleetchat up` through the
test-only worker command setting) that honour `continue_final_message`, so the continuation is checked word for word.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageParam

from functions.control.routing import HashRing
from tests.integration.local_stack.test_supervision import Up, alive, start_up
from tests.support.processes import ProcessGroup
from tests.support.stand_ins.continuing_worker import tokens

SCRIPT = (
    "The harbour master rang the bell at first light, counted the boats going out past the breakwater, wrote each "
    "name in the ledger by the window, and waited for the tide to turn before the ferry came in."
)
WORDS = len(tokens(SCRIPT))
KILL_AFTER_CHUNKS = 6
QUESTION = "Tell me about a harbour morning."
PROMPT: list[ChatCompletionMessageParam] = [{"role": "user", "content": QUESTION}]


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path / "logs")
    yield group
    group.stop()


def _worker_command(request_logs: Path) -> list[str]:
    # 100 ms a word: the answer takes ~4 s, long enough to be killed in the middle of it.
    return [
        "{python}", "-m", "tests.support.stand_ins.continuing_worker", "--pool", "{pool}", "--port", "{port}",
        "--script", SCRIPT, "--delay", "0.1", "--log", str(request_logs / "requests-{port}.jsonl"),
    ]  # fmt: skip


def _requests(request_logs: Path, port: int) -> list[dict]:
    path = request_logs / f"requests-{port}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _worker_pid(up: Up, port: int) -> int:
    state = json.loads((up.data_dir / "up.json").read_text())
    return next(int(w["pid"]) for w in state["workers"] if w["port"] == port)


def _ledger_rows(data_dir: Path, request_id: str) -> list[sqlite3.Row]:
    deadline = time.monotonic() + 10
    while True:
        db = sqlite3.connect(data_dir / "fleetchat.db")
        db.row_factory = sqlite3.Row
        try:
            rows = db.execute("SELECT * FROM ledger WHERE request_id = ?", (request_id,)).fetchall()
        finally:
            db.close()
        if rows or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def test_kill_9_of_the_streaming_replica_under_supervision_continues_and_the_replica_comes_back(
    group: ProcessGroup, tmp_path: Path
) -> None:
    request_logs = tmp_path / "requests"
    request_logs.mkdir()
    up = start_up(group, tmp_path / "data", command=_worker_command(request_logs), replicas=2)
    ports = [up.worker_port, up.worker_port + 1]
    replicas = [f"http://127.0.0.1:{p}" for p in ports]
    ring = HashRing(replicas)
    session = next(f"s{i}" for i in range(1000) if next(ring.candidates(f"s{i}")) == replicas[0])
    victim = _worker_pid(up, ports[0])
    key = (up.data_dir / "local_api_key").read_text().strip()
    client = OpenAI(base_url=f"{up.url}/v1", api_key=key, max_retries=0, timeout=60)

    lines: list[str] = []
    content_chunks = 0
    killed_at: float | None = None
    with client.chat.completions.with_streaming_response.create(
        model="mini",
        messages=PROMPT,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"store": True},
        extra_headers={"x-session-id": session},
    ) as response:
        request_id, conversation_id = response.headers["x-request-id"], response.headers["x-conversation-id"]
        for line in response.iter_lines():
            if not line.strip():
                continue
            lines.append(line)
            if not line.startswith("data: {"):
                continue
            choices = json.loads(line.removeprefix("data: ")).get("choices") or []
            if choices and choices[0]["delta"].get("content"):
                content_chunks += 1
                if content_chunks == KILL_AFTER_CHUNKS:
                    os.kill(victim, signal.SIGKILL)  # mid-answer
                    killed_at = time.monotonic()

    assert killed_at is not None, "the answer ended before the kill"
    # One stream: one id, one [DONE] (last), no error event, the whole script, each word once.
    assert lines.count("data: [DONE]") == 1 and lines[-1] == "data: [DONE]", lines[-3:]
    assert not any(line.startswith("event: error") for line in lines)
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: {")]
    assert len({c["id"] for c in chunks}) == 1 and len({c["created"] for c in chunks}) == 1
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    assert text == SCRIPT
    announced = [c["continuation"] for c in chunks if "continuation" in c]
    assert announced == [{"pool": "mini", "fallback": False}]  # continued on the other replica of the pool
    # The first leg was the victim's, the second the other replica's, continuing the partial answer.
    first_leg, second_leg = _requests(request_logs, ports[0]), _requests(request_logs, ports[1])
    assert len(first_leg) == 1 and len(second_leg) == 1
    partial = second_leg[0]["messages"][-1]
    assert second_leg[0]["continue_final_message"] is True and partial["role"] == "assistant"
    assert SCRIPT.startswith(partial["content"]) and len(tokens(partial["content"])) >= KILL_AFTER_CHUNKS

    # Usage: the first leg's prompt, completion tokens generated across both legs; billed once.
    usage = next(c["usage"] for c in reversed(chunks) if c.get("usage"))
    prompt_words = len(tokens(" ".join(m["content"] for m in first_leg[0]["messages"])))
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (prompt_words, WORDS)
    rows = _ledger_rows(up.data_dir, request_id)
    assert len(rows) == 1, rows
    assert (rows[0]["outcome"], rows[0]["prompt_tokens"], rows[0]["completion_tokens"]) == (
        "completed",
        prompt_words,
        WORDS,
    )
    stored = httpx.get(
        f"{up.url}/v1/conversations/{conversation_id}", headers={"authorization": f"Bearer {key}"}, timeout=10
    ).json()
    assert [(m["role"], m["content"]) for m in stored["messages"][-2:]] == [
        ("user", QUESTION),
        ("assistant", SCRIPT),
    ]

    # The supervisor restarts the killed replica on its port; a request pinned to it (its session) reaches it again.
    served_before = len(_requests(request_logs, ports[0]))
    back_after: float | None = None
    while time.monotonic() - killed_at < 60:
        reply = client.chat.completions.create(
            model="mini", messages=PROMPT, max_tokens=3, extra_headers={"x-session-id": session}
        )
        assert reply.choices[0].message.content == "".join(tokens(SCRIPT)[:3])
        if len(_requests(request_logs, ports[0])) > served_before:
            back_after = time.monotonic() - killed_at
            break
        time.sleep(0.5)
    assert back_after is not None, f"the killed replica did not serve again within 60 s:\n{up.output()[-3000:]}"
    restarted = _worker_pid(up, ports[0])
    assert restarted != victim and alive(restarted) and not alive(victim)
    assert f"worker mini-0 (port {ports[0]}, pid {victim}): killed by signal SIGKILL; restart 1 in" in up.output()
    print(f"killed replica serving again {back_after:.1f} s after the kill")

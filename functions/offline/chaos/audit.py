"""The chaos run's books: for every request aiperf sent, what the fleet did with it, from the fleet's own records.

Each accepted answer (one whose first event reached the client) is read back whole from the fleet through the load
balancer (`GET /v1/chat/completions/{id}/stream` from the start: the events every client of it was sent), and:
- the client's events are numbered 1, 2, 3 ... without a gap or a repeat, and its text is the start of the answer's
  (all of it when the client got `[DONE]`);
- a client whose connection broke (its gateway was killed under it) resumes after the last event it got, as a
  resuming client would, and its text plus the rest is the whole answer;
- the answer stored in the conversation is the answer's text;
- the ledger's completion tokens for the request id are the usage the answer reported.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel

from functions.offline.chaos.aiperf_load import ClientRequest

READ_TIMEOUT_S = 180.0  # a replay waits for an answer another gateway is still finishing


@dataclass
class Replay:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    ids: list[int] = field(default_factory=list)
    text: str = ""
    done: bool = False
    error_codes: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None


def read_stream(http: httpx.Client, url: str, headers: dict[str, str]) -> Replay:
    """One SSE stream read to its end."""
    with http.stream("GET", url, headers=headers, timeout=READ_TIMEOUT_S) as response:
        replay = Replay(status=response.status_code, headers=dict(response.headers))
        if response.status_code != 200:
            response.read()
            return replay
        event = None
        for line in response.iter_lines():
            if line.startswith("id: "):
                replay.ids.append(int(line[4:]))
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                _take(replay, line[6:], event)
                event = None
    return replay


def _take(replay: Replay, data: str, event: str | None) -> None:
    if data == "[DONE]":
        replay.done = True
        return
    chunk = json.loads(data)
    if event == "error" or ("error" in chunk and "choices" not in chunk):
        replay.error_codes.append(str((chunk.get("error") or {}).get("code")))
        return
    if isinstance(chunk.get("usage"), dict):
        replay.usage = chunk["usage"]
    for choice in chunk.get("choices") or []:
        replay.text += (choice.get("delta") or {}).get("content") or ""
        replay.finish_reason = choice.get("finish_reason") or replay.finish_reason


class RequestAudit(BaseModel):
    index: int
    verdict: str  # whole | recovered | not accepted | lost
    problems: list[str]
    completion_id: str | None = None
    request_id: str | None = None
    client_events: int = 0
    answer_events: int = 0
    usage_tokens: int | None = None
    ledger_tokens: int | None = None
    ledger_outcome: str | None = None
    stored_finish_reason: str | None = None


def contiguous(ids: list[int]) -> bool:
    return ids == list(range(1, len(ids) + 1))


class BooksAuditor:
    def __init__(self, base_url: str, api_key: str, db_path: Path) -> None:
        self.base_url = base_url.rstrip("/")
        self.auth = {"Authorization": f"Bearer {api_key}"}
        self.db_path = db_path

    def audit(self, requests: list[ClientRequest]) -> list[RequestAudit]:
        with httpx.Client() as http:
            return [self.audit_one(http, request) for request in requests]

    def audit_one(self, http: httpx.Client, request: ClientRequest) -> RequestAudit:
        if not request.accepted:
            return RequestAudit(index=request.index, verdict="not accepted", problems=[request.error or "no answer"])
        stream_url = f"{self.base_url}/v1/chat/completions/{request.completion_id}/stream"
        whole = read_stream(http, stream_url, self.auth)
        audit = RequestAudit(
            index=request.index, verdict="whole", problems=[], completion_id=request.completion_id,
            request_id=whole.headers.get("x-request-id"), client_events=len(request.event_ids),
            answer_events=len(whole.ids),
        )  # fmt: skip
        problems = audit.problems  # the model's own list (pydantic copies a list it is given)
        if whole.status != 200 or not whole.done:
            problems.append(f"the answer could not be read back whole (HTTP {whole.status}, ended: {whole.done})")
            audit.verdict = "lost"
            return audit
        if not contiguous(request.event_ids):
            problems.append(f"the client's events are not 1..n: {request.event_ids[:5]}...")
        if not contiguous(whole.ids):
            problems.append("the answer's events are not 1..n")
        if not whole.text.startswith(request.text):
            problems.append("the client's text is not the start of the answer's (a repeat or a gap)")
        client_ended = request.done and not request.error
        if client_ended and request.text != whole.text:
            problems.append("the client got [DONE] but not the whole answer")
        if not client_ended:
            audit.verdict = "recovered"
            after = request.event_ids[-1] if request.event_ids else 0
            rest = read_stream(http, stream_url, {**self.auth, "Last-Event-ID": str(after)})
            if rest.status != 200 or not rest.done:
                problems.append(f"the resume after event {after} failed (HTTP {rest.status})")
            elif request.text + rest.text != whole.text or rest.ids != list(
                range(after + 1, after + 1 + len(rest.ids))
            ):
                problems.append(f"the client's events and the resume after event {after} are not the whole answer")
        if whole.error_codes:
            problems.append(f"the answer ended with an error event: {whole.error_codes}")
        audit.usage_tokens = (whole.usage or {}).get("completion_tokens")
        self._check_ledger(audit, problems)
        self._check_stored(http, whole, audit, problems)
        if problems:
            audit.verdict = "lost"
        return audit

    def _check_ledger(self, audit: RequestAudit, problems: list[str]) -> None:
        if audit.request_id is None:
            problems.append("no request id on the answer")
            return
        db = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=30)
        try:
            rows = db.execute(
                "SELECT completion_tokens, outcome FROM ledger WHERE request_id = ?", (audit.request_id,)
            ).fetchall()
        finally:
            db.close()
        if len(rows) != 1:
            problems.append(f"{len(rows)} ledger entries for {audit.request_id}")
            return
        audit.ledger_tokens, audit.ledger_outcome = int(rows[0][0]), str(rows[0][1])
        if audit.usage_tokens is None:
            problems.append("the answer reported no usage")
        elif audit.ledger_tokens != audit.usage_tokens:
            problems.append(f"ledger {audit.ledger_tokens} completion tokens, usage {audit.usage_tokens}")

    def _check_stored(self, http: httpx.Client, whole: Replay, audit: RequestAudit, problems: list[str]) -> None:
        conversation_id = whole.headers.get("x-conversation-id")
        if not conversation_id:
            problems.append("no conversation id: the answer was not stored")
            return
        response = http.get(f"{self.base_url}/v1/conversations/{conversation_id}", headers=self.auth, timeout=30)
        if response.status_code != 200:
            problems.append(f"the conversation is not readable (HTTP {response.status_code})")
            return
        messages = response.json().get("messages") or []
        last = messages[-1] if messages else {}
        audit.stored_finish_reason = last.get("finish_reason")
        if last.get("role") != "assistant" or last.get("content") != whole.text:
            problems.append("the stored answer is not the answer's text")

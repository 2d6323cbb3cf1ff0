"""`fleetchat chaos`'s parts: aiperf's raw export read back (two real records: one whole, one whose gateway was killed
under it), the books audit against a fleet that serves the read-back and resume endpoints and a real SQLite ledger,
the faults on real processes and a real SQLite file, and the report with its plot."""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from functions.local_stack.stack_lock import StackState, WorkerRecord
from functions.offline.chaos.aiperf_load import ClientRequest, parse_record
from functions.offline.chaos.audit import BooksAuditor, RequestAudit
from functions.offline.chaos.faults import FaultEvent, FaultSchedule, inject, lock_database
from functions.offline.chaos.fleet import ChaosFleet
from functions.offline.chaos.plan import ChaosConfig, Fault, FaultKind, default_faults
from functions.offline.chaos.report import ChaosResult, write
from functions.offline.measure.redis_process import RedisServer
from tests.support.servers import serve

RECORDS = Path(__file__).with_name("aiperf_raw_records.jsonl")


def real_records() -> list[dict]:
    return [json.loads(line) for line in RECORDS.read_text().splitlines()]


def test_a_whole_stream_and_a_broken_one_read_from_aiperfs_raw_export() -> None:
    whole, broken = real_records()
    t0 = int(whole["metadata"]["request_start_ns"]) - 1_000_000_000
    got = parse_record(0, whole, t0)
    assert got.accepted and got.done and got.error is None
    assert got.event_ids == list(range(1, len(got.event_ids) + 1)) and len(got.event_ids) == 23
    assert got.completion_id is not None and got.completion_id.startswith("chatcmpl-") and got.text
    assert got.start_s == pytest.approx(1.0) and got.end_s > got.start_s
    assert got.content_times_s == sorted(got.content_times_s) and got.content_times_s[0] >= got.start_s
    cut = parse_record(1, broken, t0)
    assert cut.accepted and not cut.done and cut.event_ids == [1, 2, 3]
    assert cut.error is not None and "payload is not completed" in cut.error


# A fleet as the audit sees it: the read-back/resume endpoint, the conversations, and the ledger in a SQLite file.
ANSWER = ["Bread ", "rises ", "because ", "yeast ", "makes ", "gas."]


def sse(events: list[tuple[int, str]]) -> bytes:
    return b"".join(f"id: {i}\ndata: {data}\n\n".encode() for i, data in events)


def answer_events(completion_id: str, usage_tokens: int) -> list[tuple[int, str]]:
    chunks = [{"id": completion_id, "choices": [{"index": 0, "delta": {"content": piece}}]} for piece in ANSWER]
    chunks.append(
        {"id": completion_id, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": usage_tokens}}
    )
    return [(i + 1, json.dumps(c)) for i, c in enumerate(chunks)] + [(len(chunks) + 1, "[DONE]")]


def fleet_app(usage_tokens: int, stored_text: str) -> Starlette:
    async def stream(request: Request) -> Response:
        after = int(request.headers.get("last-event-id", "0"))
        events = [e for e in answer_events(request.path_params["cid"], usage_tokens) if e[0] > after]
        headers = {"x-request-id": f"req_{request.path_params['cid']}", "x-conversation-id": "conv_1"}
        return Response(sse(events), media_type="text/event-stream", headers=headers)

    async def conversation(request: Request) -> Response:
        answer = {"role": "assistant", "content": stored_text, "finish_reason": "stop"}
        return JSONResponse({"messages": [{"role": "user", "content": "?"}, answer]})

    return Starlette(routes=[Route("/v1/chat/completions/{cid}/stream", stream),
                             Route("/v1/conversations/{conversation_id}", conversation)])  # fmt: skip


def ledger(path: Path, rows: dict[str, int]) -> Path:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE ledger (request_id TEXT PRIMARY KEY, completion_tokens INTEGER, outcome TEXT)")
    db.executemany("INSERT INTO ledger VALUES (?, ?, 'completed')", [(f"req_{k}", v) for k, v in rows.items()])
    db.commit()
    db.close()
    return path


def client(index: int, cid: str | None, pieces: int, *, done: bool) -> ClientRequest:
    ids = list(range(1, pieces + 1)) + ([pieces + 1, pieces + 2] if done else [])
    return ClientRequest(index=index, start_s=0, end_s=1, status=200 if cid else 502, error=None if done else "broke",
                         completion_id=cid, event_ids=ids, text="".join(ANSWER[:pieces]), done=done)  # fmt: skip


@pytest.fixture
def fleet_url() -> Iterator[str]:
    with serve(fleet_app(usage_tokens=6, stored_text="".join(ANSWER))) as url:
        yield url


def test_the_audit_calls_a_whole_stream_whole_and_a_broken_one_recovered_when_the_books_agree(
    fleet_url: str, tmp_path: Path
) -> None:
    db = ledger(tmp_path / "fleetchat.db", {"chatcmpl-a": 6, "chatcmpl-b": 6})
    audits = BooksAuditor(fleet_url, "key", db).audit(
        [client(0, "chatcmpl-a", 6, done=True), client(1, "chatcmpl-b", 2, done=False), client(2, None, 0, done=False)]
    )
    assert [a.verdict for a in audits] == ["whole", "recovered", "not accepted"]
    assert audits[0].problems == [] and audits[1].problems == []
    assert audits[1].ledger_tokens == audits[1].usage_tokens == 6 and audits[1].request_id == "req_chatcmpl-b"


def test_the_audit_calls_lost_what_the_ledger_or_the_store_or_the_client_got_wrong(tmp_path: Path) -> None:
    db = ledger(tmp_path / "fleetchat.db", {"chatcmpl-a": 5})  # one token short of the usage; chatcmpl-c: no entry
    with serve(fleet_app(usage_tokens=6, stored_text="Bread rises")) as url:
        repeated = client(2, "chatcmpl-a", 2, done=False)
        repeated.text = "Bread Bread "  # a repeated piece
        audits = BooksAuditor(url, "key", db).audit([client(0, "chatcmpl-a", 6, done=True),
                                                     client(1, "chatcmpl-c", 6, done=True), repeated])  # fmt: skip
    assert [a.verdict for a in audits] == ["lost", "lost", "lost"]
    assert any("ledger 5 completion tokens, usage 6" in p for p in audits[0].problems)
    assert any("stored answer" in p for p in audits[0].problems)
    assert any("0 ledger entries" in p for p in audits[1].problems)
    assert any("not the start of the answer" in p for p in audits[2].problems)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "60"])
    yield process
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)
        process.kill()
        process.wait()


def fleet_of(tmp_path: Path, process: subprocess.Popen[bytes]) -> ChaosFleet:
    worker = WorkerRecord(name="gateway-0", pool="gateway", port=1, pid=process.pid, command=["sleep"])
    state = StackState(supervisor_pid=process.pid, started_at=datetime.now(UTC), gateway_port=1, workers=[worker])
    (tmp_path / "up.json").write_text(state.model_dump_json())
    return ChaosFleet(url="", gateway_urls=[], data_dir=tmp_path, api_key="", redis=RedisServer("", process),
                      up=process, log_path=tmp_path / "up.log")  # fmt: skip


def state_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]


def test_a_kill_fault_sends_sigkill_to_the_named_process(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    detail = inject(Fault(kind=FaultKind.GATEWAY, at_s=0, target="gateway-0"), fleet_of(tmp_path, sleeper))
    assert sleeper.wait(timeout=10) == -signal.SIGKILL and "SIGKILL" in detail


def test_a_pause_stops_the_store_process_for_its_hold_and_resumes_it(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    fault = Fault(kind=FaultKind.CONTROL_STATE, at_s=0.1, target="redis", hold_s=0.6)
    schedule = FaultSchedule([fault], fleet_of(tmp_path, sleeper))
    schedule.begin(time.monotonic())
    time.sleep(0.4)
    assert state_of(sleeper.pid) == "T"  # stopped: it answers nobody
    schedule.join(timeout=10)
    assert state_of(sleeper.pid) == "S" and sleeper.poll() is None
    [event] = schedule.events
    assert event.until_s - event.at_s == pytest.approx(0.6, abs=0.2) and schedule.errors == []


def test_a_database_lock_holds_off_every_other_writer_until_it_ends(tmp_path: Path) -> None:
    path = tmp_path / "fleetchat.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    schedule = FaultSchedule([Fault(kind=FaultKind.DATABASE, at_s=0, target="fleetchat.db", hold_s=0.8)],
                             fleet_of(tmp_path, subprocess.Popen(["true"])))  # fmt: skip
    schedule.begin(time.monotonic())
    time.sleep(0.3)
    other = sqlite3.connect(path, timeout=0.05)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        other.execute("INSERT INTO t VALUES (1)")
    schedule.join(timeout=10)
    other.execute("INSERT INTO t VALUES (1)")
    other.commit()
    assert "exclusive transaction" in lock_database(path, 0.0)


def test_a_fault_that_cannot_be_injected_is_reported_not_raised(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    schedule = FaultSchedule([Fault(kind=FaultKind.WORKER, at_s=0, target="mini-9")], fleet_of(tmp_path, sleeper))
    schedule.begin(time.monotonic())
    schedule.join(timeout=10)
    assert schedule.events == [] and "mini-9" in schedule.errors[0]


def test_the_default_plan_has_one_fault_of_each_kind_in_time_order() -> None:
    plan = ChaosConfig(out_dir=Path("x")).fault_plan()
    assert [f.kind for f in plan] == list(FaultKind) and plan == default_faults("mini")
    assert [f.at_s for f in plan] == sorted(f.at_s for f in plan)


def test_the_report_says_pass_only_when_nothing_was_lost_and_draws_the_timeline(tmp_path: Path) -> None:
    whole, broken = real_records()
    t0 = int(whole["metadata"]["request_start_ns"])
    requests = [parse_record(0, whole, t0), parse_record(1, broken, t0)]
    audits = [
        RequestAudit(index=0, verdict="whole", problems=[]),
        RequestAudit(index=1, verdict="recovered", problems=[]),
    ]
    fault = FaultEvent(kind=FaultKind.GATEWAY, target="gateway-0", at_s=0.5, until_s=0.5, detail="SIGKILL")
    result = ChaosResult(started_at="now", config={"concurrency": 2}, machine={}, aiperf_exit=0, load_s=10,
                         faults=[fault], requests=requests, audits=audits)  # fmt: skip
    assert result.passed
    path = write(result, tmp_path)
    text = path.read_text()
    assert "**PASS**" in text and "| 0.5 | 0.5 | gateway kill -9 | gateway-0 |" in text
    assert (tmp_path / "timeline.png").stat().st_size > 10_000 and "![timeline](timeline.png)" in text
    result.planned_faults = 2  # a fault the load ended before: that fault was never tested
    assert not result.passed
    result.planned_faults = 1
    audits[1].verdict = "lost"
    assert not result.passed and "**FAIL**" in write(result, tmp_path / "again").read_text()


def test_aiperf_is_asked_for_stored_resumable_answers_and_every_event_it_got() -> None:
    from functions.offline.chaos.aiperf_load import command

    where = {"dataset": Path("d.jsonl"), "tokenizer": Path("tok"), "artifact_dir": Path("out")}
    cmd = command("/x/aiperf", url="http://127.0.0.1:9/v1", api_key="k", model="mini", concurrency=8, requests=32,
                  max_tokens=64, **where)  # fmt: skip
    pairs = set(itertools.pairwise(cmd))
    assert cmd[:2] == ["/x/aiperf", "profile"] and ("--url", "http://127.0.0.1:9") in pairs
    assert {("--extra-inputs", "store:true"), ("--extra-inputs", "max_tokens:64"), ("--export-level", "raw")} <= pairs
    assert ("--header", "X-Fleetchat-Resumable:yes") in pairs and ("--concurrency", "8") in pairs


def test_the_brownout_watch_times_each_gateways_switch_and_the_spread_between_them() -> None:
    from functions.offline.chaos.agreement import Switch, _watch

    def gateway(switch_after_s: float) -> Starlette:
        started = time.monotonic()

        async def metrics(request: Request) -> Response:
            value = 1 if time.monotonic() - started >= switch_after_s else 0
            return Response(f'fleetchat_gateway_brownout_pool_active{{pool="mini"}} {value}\n')

        return Starlette(routes=[Route("/metrics", metrics)])

    with serve(gateway(0.0)) as first, serve(gateway(0.6)) as second:
        seen = asyncio.run(_watch([first, second], 1.0, time.monotonic(), 0.05))
    assert set(seen) == {first, second} and seen[second] - seen[first] == pytest.approx(0.6, abs=0.3)
    assert Switch(to="on", at_s=seen).spread_s == pytest.approx(seen[second] - seen[first])
    assert Switch(to="off", at_s={first: 1.0}).spread_s is None

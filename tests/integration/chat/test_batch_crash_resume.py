"""Batches under faults and limits. A batch survives kill -9 of the gateway running it: a second gateway takes the
batch over once the lease lapses and runs exactly the lines without a result. Every line is in the output once, every
line is billed once (one ledger entry under the line's own request id, at the batch price), and the worker answered
at most the in-flight lines twice. The batch job runs what no gateway runs; a batch spends rate-limit windows of its
own.

The worker is a stand-in that takes a moment per answer (so the kill lands mid-batch); the gateways are real processes
on loopback with the real SQLite store, and the client is the `openai` SDK."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import sqlite3
import time
from pathlib import Path

import openai
import pytest
from fastapi import FastAPI

from functions.batches.runner import line_request_id
from shared.api_keys import hash_api_key, new_api_key
from shared.fleet.tiers import LimitOverrides, Tier
from shared.storage.accounts import TenantChanges
from shared.storage.sqlite.accounts import SQLiteStore
from tests.integration.conftest import GatewayFactory
from tests.support.processes import ProcessGroup, free_port, start_gateway
from tests.support.servers import serve

LINES = 12
CONCURRENT = 2
BATCH_ENV = {
    "FLEETCHAT_BATCH_LEASE_S": "1.5",
    "FLEETCHAT_BATCH_POLL_S": "0.3",
    "FLEETCHAT_BATCH_CONCURRENT_LINES": str(CONCURRENT),
}


def slow_worker(delay_s: float) -> FastAPI:
    """Answers each chat request with its last message's text after `delay_s`; counts what it was asked."""
    app = FastAPI()
    app.state.asked = []

    @app.post("/v1/chat/completions")
    async def chat(body: dict) -> dict:
        question = body["messages"][-1]["content"]
        app.state.asked.append(question)
        await asyncio.sleep(delay_s)
        return {
            "id": "c1", "object": "chat.completion", "created": 1, "model": "mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": f"re: {question}"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
        }  # fmt: skip

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "mini", "object": "model", "owned_by": "fleetchat"}]}

    return app


def plus_tenant(data_dir: Path) -> tuple[str, str]:
    """(tenant id, API key) of a new plus tenant in the data dir's store, before any gateway starts."""
    store = SQLiteStore(data_dir / "fleetchat.db")
    try:
        tenant = store.create_tenant("t", Tier.PLUS)
        key = new_api_key()
        store.add_api_key(tenant.id, hash_api_key(key), "t")
        return tenant.id, key
    finally:
        store.close()


def _lines_kept(db_path: Path, batch_id: str) -> int:
    db = sqlite3.connect(db_path)
    try:
        return int(db.execute("SELECT COUNT(*) FROM batch_lines WHERE batch_id = ?", (batch_id,)).fetchone()[0])
    finally:
        db.close()


def _ledger(db_path: Path, tenant_id: str) -> list[tuple[str, str, int]]:
    db = sqlite3.connect(db_path)
    try:
        return db.execute(
            "SELECT request_id, price_class, prompt_tokens FROM ledger WHERE tenant_id = ?", (tenant_id,)
        ).fetchall()
    finally:
        db.close()


def test_a_batch_survives_kill_9_of_its_gateway_without_repeating_or_losing_a_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    tenant_id, key = plus_tenant(data_dir)
    requests = [
        {"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "mini", "messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 8}}
        for i in range(LINES)
    ]  # fmt: skip
    jsonl = "".join(json.dumps(r) + "\n" for r in requests).encode()
    group = ProcessGroup(tmp_path / "logs")
    app = slow_worker(0.4)
    with serve(app) as worker_url:
        workers = {"mini": [worker_url], "flagship": [worker_url]}
        try:
            url = start_gateway(group, data_dir, workers, free_port(), BATCH_ENV)
            api = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
            uploaded = api.files.create(file=("questions.jsonl", io.BytesIO(jsonl)), purpose="batch")
            batch = api.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            db_path = data_dir / "fleetchat.db"
            deadline = time.monotonic() + 60
            while _lines_kept(db_path, batch.id) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            group.procs[-1].send_signal(signal.SIGKILL)  # mid-batch: lines kept, lines in flight, lines not started
            group.procs[-1].wait(timeout=10)
            kept_at_kill = _lines_kept(db_path, batch.id)
            assert 3 <= kept_at_kill < LINES

            url = start_gateway(group, data_dir, workers, free_port(), BATCH_ENV)
            api = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
            deadline = time.monotonic() + 90
            while (batch := api.batches.retrieve(batch.id)).status not in ("completed", "failed", "expired"):
                assert time.monotonic() < deadline, batch
                time.sleep(0.2)
            assert batch.status == "completed", batch
            counts = batch.request_counts
            assert counts is not None and (counts.total, counts.completed, counts.failed) == (LINES, LINES, 0)
            assert batch.output_file_id is not None and batch.error_file_id is None
            output = [json.loads(line) for line in api.files.content(batch.output_file_id).text.splitlines()]
        finally:
            group.stop()
    # Every line once in the output, with its own answer.
    assert sorted(line["custom_id"] for line in output) == sorted(f"q{i}" for i in range(LINES))
    for line in output:
        number = int(line["custom_id"][1:])
        assert line["response"]["status_code"] == 200
        assert line["response"]["body"]["choices"][0]["message"]["content"] == f"re: question {number}"
    # Every line billed once, under its own request id, at the batch price.
    rows = _ledger(data_dir / "fleetchat.db", tenant_id)
    assert sorted(r[0] for r in rows) == sorted(line_request_id(batch.id, i) for i in range(LINES))
    assert {r[1] for r in rows} == {"batch"}
    # The worker answered every line, and again at most the lines in flight when the gateway died.
    asked = app.state.asked
    assert set(asked) == {f"question {i}" for i in range(LINES)}
    assert len(asked) <= LINES + CONCURRENT


def test_the_batch_job_runs_what_no_gateway_runs(tmp_path: Path) -> None:
    """Gateways that run no batches (FLEETCHAT_BATCH_RUN_IN_GATEWAY=false) leave a batch validating; the batch job
    (the deployed scheduled function's code, functions/jobs/batch_run.py) runs it to the end, and a run with nothing
    to do returns without starting anything."""
    from functions.jobs.batch_run import run_batches_from_settings
    from shared.settings import Settings

    data_dir = tmp_path / "data"
    _, key = plus_tenant(data_dir)
    requests = [
        {"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "mini", "messages": [{"role": "user", "content": f"question {i}"}]}}
        for i in range(3)
    ]  # fmt: skip
    group = ProcessGroup(tmp_path / "logs")
    with serve(slow_worker(0.0)) as worker_url:
        workers = {"mini": [worker_url], "flagship": [worker_url]}
        try:
            url = start_gateway(group, data_dir, workers, free_port(), {"FLEETCHAT_BATCH_RUN_IN_GATEWAY": "false"})
            api = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
            jsonl = "".join(json.dumps(r) + "\n" for r in requests).encode()
            uploaded = api.files.create(file=("q.jsonl", io.BytesIO(jsonl)), purpose="batch")
            batch = api.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            time.sleep(1.0)
            assert api.batches.retrieve(batch.id).status == "validating"  # no gateway runs it

            settings = Settings(data_dir=data_dir, worker_urls=workers, pools=list(workers))
            report = run_batches_from_settings(settings, budget_s=60)
            assert (report.active_at_start, report.started, report.active_at_end) == (1, 1, 0)
            done = api.batches.retrieve(batch.id)
            assert done.status == "completed" and done.request_counts is not None and done.request_counts.completed == 3
            assert run_batches_from_settings(settings, budget_s=60).active_at_start == 0
        finally:
            group.stop()


def test_a_batch_spends_rate_limit_windows_of_its_own(gateway_for: GatewayFactory) -> None:
    """A tenant allowed 5 requests a minute runs a 4-line batch, then still sends 5 requests of its own in the same
    minute: a batch never spends the interactive limits (functions/control/batch_lines.py)."""
    with serve(slow_worker(0.0)) as worker_url:
        gateway = gateway_for({"mini": [worker_url], "flagship": [worker_url]})
        store = SQLiteStore(gateway.data_dir / "fleetchat.db")
        try:
            owner = next(t for t in store.list_tenants() if t.name == "owner")
            store.update_tenant(owner.id, TenantChanges(limits=LimitOverrides(key_rpm=5, tenant_rpm=5)))
        finally:
            store.close()
        api = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.key, max_retries=0, timeout=30)
        requests = [
            {"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": "mini", "messages": [{"role": "user", "content": f"question {i}"}]}}
            for i in range(4)
        ]  # fmt: skip
        jsonl = "".join(json.dumps(r) + "\n" for r in requests).encode()
        uploaded = api.files.create(file=("q.jsonl", io.BytesIO(jsonl)), purpose="batch")
        batch = api.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
        deadline = time.monotonic() + 30
        while (batch := api.batches.retrieve(batch.id)).status != "completed":
            assert time.monotonic() < deadline and batch.status in ("validating", "in_progress", "finalizing"), batch
            time.sleep(0.1)
        answers = [
            api.chat.completions.create(model="mini", messages=[{"role": "user", "content": f"now {i}"}])
            for i in range(5)
        ]
        assert len(answers) == 5
        with pytest.raises(openai.RateLimitError):  # the interactive window itself still holds
            api.chat.completions.create(model="mini", messages=[{"role": "user", "content": "one more"}])

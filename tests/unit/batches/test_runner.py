"""The batch runner's rules, on the real SQLite stores and file backends with the line's endpoint replaced by a
scripted one (the endpoints themselves run for real in tests/integration/chat/test_batches_api.py): the input checked
before any line runs, a 5xx tried again under the next request id, a 429 waited out, a batch past its window expired
with its remaining lines in the error file, and a revoked key failing the batch."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from functions.accounts.auth import Caller
from functions.accounts.operations import create_tenant_with_key
from functions.batches.input_file import read_input
from functions.batches.lines import LineAnswer
from functions.batches.runner import BatchMetrics, BatchRunner, line_request_id
from functions.files.backends import FileBackends
from functions.files.files_service import FilesService
from shared.errors import RateLimitError, UpstreamError
from shared.fleet.tiers import Tier
from shared.settings import BatchSettings
from shared.storage.batches import LineResult, StoredBatch, new_batch_id
from shared.storage.file_blobs import LocalBlobStore
from shared.storage.files import FileQuota, StoredFile
from shared.storage.lance_vector_index import LanceVectorIndex
from shared.storage.sqlite.accounts import SQLiteStore
from shared.storage.sqlite.batches import SQLiteBatchStore
from shared.storage.sqlite.files import SQLiteFileStore
from shared.storage.timestamps import utc_now

CHAT = "/v1/chat/completions"


@dataclass
class ScriptedLines:
    """Answers each line by its custom script: a list of answers per question, the last repeated."""

    scripts: dict[str, list[LineAnswer]]
    asked: list[tuple[str, str]] = field(default_factory=list)  # (question, request id)

    async def run(self, caller: Caller, endpoint: str, body: dict[str, Any], request_id: str) -> LineAnswer:
        question = body["messages"][-1]["content"]
        self.asked.append((question, request_id))
        script = self.scripts.get(question) or [OK]
        return script.pop(0) if len(script) > 1 else script[0]


OK = LineAnswer(200, {"object": "chat.completion", "usage": {"prompt_tokens": 5, "completion_tokens": 2}})


def _error(exc: Exception) -> LineAnswer:
    assert hasattr(exc, "status_code")
    return LineAnswer(exc.status_code, exc.to_response_model().model_dump(), exc)  # type: ignore[attr-defined]


@dataclass
class World:
    store: SQLiteBatchStore
    files: FilesService
    tenants: SQLiteStore
    tenant_id: str
    key_id: str
    spool: Path

    def batch(
        self,
        questions: list[str],
        *,
        expires_in: timedelta = timedelta(hours=24),
        output_expires_after_s: int | None = None,
    ) -> StoredBatch:
        body = "".join(
            json.dumps({"custom_id": q, "method": "POST", "url": CHAT,
                        "body": {"model": "mini", "messages": [{"role": "user", "content": q}]}}) + "\n"
            for q in questions
        ).encode()  # fmt: skip
        file_id = f"file-{new_batch_id()[6:]}"
        path = self.spool / f"{file_id}.jsonl"
        path.write_bytes(body)
        self.files.backends.blobs.put(self.tenant_id, file_id, str(path))
        self.files.backends.files.add_file(
            StoredFile(id=file_id, tenant_id=self.tenant_id, filename="in.jsonl", purpose="batch", bytes=len(body),
                       kind="jsonl", sha256="0", created_at=utc_now()),
            FileQuota(max_files=100, max_total_bytes=10**9),
        )  # fmt: skip
        now = utc_now()
        batch = StoredBatch(
            id=new_batch_id(), tenant_id=self.tenant_id, key_id=self.key_id, endpoint=CHAT, input_file_id=file_id,
            status="validating", created_at=now, expires_at=now + expires_in,
            output_expires_after_s=output_expires_after_s,
        )  # fmt: skip
        self.store.create(batch)
        return batch

    def run(self, lines: ScriptedLines) -> None:
        settings = BatchSettings(lease_s=5, poll_s=0.1, concurrent_lines=2, line_attempts=3)
        runner = BatchRunner(self.store, self.files, self.tenants, lines, settings, BatchMetrics(CollectorRegistry()))  # type: ignore[arg-type]

        async def drained() -> None:
            await runner.drain(asyncio.get_running_loop().time() + 30)

        asyncio.run(drained())

    def output(self, batch: StoredBatch, kind: str) -> dict[str, dict[str, Any]]:
        kept = self.store.get(batch.tenant_id, batch.id)
        assert kept is not None
        file_id = kept.output_file_id if kind == "output" else kept.error_file_id
        if file_id is None:
            return {}
        body = self.files.backends.blobs.read(batch.tenant_id, file_id) or b""
        return {line["custom_id"]: line for line in map(json.loads, body.decode().splitlines())}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    db = tmp_path / "fleetchat.db"
    tenants = SQLiteStore(db)
    tenant, minted = create_tenant_with_key(tenants, "t", Tier.PLUS, "t")
    blobs = LocalBlobStore(tmp_path / "files")
    backends = FileBackends(SQLiteFileStore(db), blobs, LanceVectorIndex(str(tmp_path / "vectors")))
    store = SQLiteBatchStore(db)
    yield World(store, FilesService(backends), tenants, tenant.id, minted.record.id, tmp_path)
    store.close()
    backends.close()
    tenants.close()


def test_every_line_runs_once_and_lands_in_the_output_in_input_order(world: World) -> None:
    batch = world.batch(["a", "b", "c"])
    lines = ScriptedLines({})
    world.run(lines)
    kept = world.store.get(world.tenant_id, batch.id)
    assert kept is not None and kept.status == "completed" and (kept.total, kept.completed, kept.failed) == (3, 3, 0)
    assert (kept.input_tokens, kept.output_tokens) == (15, 6)
    assert list(world.output(batch, "output")) == ["a", "b", "c"] and world.output(batch, "error") == {}
    assert sorted(rid for _, rid in lines.asked) == sorted(line_request_id(batch.id, i) for i in range(3))


def test_a_5xx_is_tried_again_under_the_next_request_id_and_a_429_is_waited_out(world: World) -> None:
    batch = world.batch(["flaky", "limited", "broken"])
    upstream = _error(UpstreamError("worker failed"))
    limited = _error(RateLimitError("slow down", limit_type="requests", retry_after_s=0.1))
    lines = ScriptedLines({"flaky": [upstream, OK], "limited": [limited, limited, OK], "broken": [upstream]})
    world.run(lines)
    ids = {q: [rid for asked, rid in lines.asked if asked == q] for q in ("flaky", "limited", "broken")}
    assert ids["flaky"] == [line_request_id(batch.id, 0), line_request_id(batch.id, 0, 1)]
    assert ids["limited"] == [line_request_id(batch.id, 1)] * 3  # a 429 billed nothing: the same id again
    assert len(ids["broken"]) == 3  # line_attempts in all, then its error is kept
    assert set(world.output(batch, "output")) == {"flaky", "limited"}
    kept = world.output(batch, "error")["broken"]
    assert kept["response"]["status_code"] == 502 and kept["response"]["request_id"] == line_request_id(batch.id, 2, 2)


def test_a_batch_past_its_window_expires_with_its_remaining_lines_in_the_error_file(world: World) -> None:
    batch = world.batch(["a", "b"], expires_in=timedelta(seconds=-1))
    lines = ScriptedLines({})
    world.run(lines)
    kept = world.store.get(world.tenant_id, batch.id)
    assert kept is not None and kept.status == "expired" and kept.expired_at is not None
    assert lines.asked == []
    errors = world.output(batch, "error")
    assert [e["error"]["code"] for e in errors.values()] == ["batch_expired", "batch_expired"]
    assert errors["a"]["response"] is None


def test_a_revoked_key_fails_the_batch_before_any_line_runs(world: World) -> None:
    batch = world.batch(["a"])
    world.tenants.revoke_key(world.key_id, tenant_id=world.tenant_id)
    lines = ScriptedLines({})
    world.run(lines)
    kept = world.store.get(world.tenant_id, batch.id)
    assert kept is not None and kept.status == "failed" and lines.asked == []
    assert [e.code for e in kept.errors] == ["invalid_api_key"]


def test_the_input_file_is_checked_line_by_line() -> None:
    good = {"custom_id": "a", "method": "POST", "url": CHAT, "body": {"model": "mini"}}
    lines = [
        json.dumps(good),
        "not json",
        json.dumps({**good, "custom_id": "b", "extra": 1}),
        json.dumps({**good, "custom_id": "c", "body": {"model": "other"}}),
        "",
        json.dumps(good),
    ]
    found = read_input("\n".join(lines).encode(), CHAT, max_lines=100)
    assert [(e.code, e.line) for e in found.errors] == [
        ("invalid_json_line", 2), ("invalid_request", 3), ("duplicate_custom_id", 6), ("mismatched_model", None),
    ]  # fmt: skip
    assert read_input(b"\n\n", CHAT, max_lines=10).errors[0].code == "empty_file"
    too_many = "\n".join(json.dumps({**good, "custom_id": str(i)}) for i in range(3)).encode()
    assert read_input(too_many, CHAT, max_lines=2).errors[0].code == "too_many_requests"
    assert read_input(too_many, CHAT, max_lines=3).model == "mini"


def test_a_full_pool_is_waited_out_like_a_rate_limit(world: World) -> None:
    """Batch lines queue behind interactive traffic (the lowest tier's place in a pool's queue): a pool with no place
    in time is a 503 the runner waits out without counting it as an attempt."""
    from functions.control.pool_admission import CapacityExceededError

    batch = world.batch(["busy"])
    full = _error(CapacityExceededError("The model `mini` is at capacity.", retry_after_s=0))
    lines = ScriptedLines({"busy": [full, full, full, OK]})  # more than line_attempts (3): not counted
    world.run(lines)
    assert [rid for _, rid in lines.asked] == [line_request_id(batch.id, 0)] * 4
    assert set(world.output(batch, "output")) == {"busy"}


def test_a_batch_line_is_charged_to_its_own_windows_and_queues_last() -> None:
    from functions.control.batch_lines import billed_as_batch_line, queue_tier, scope_prefix

    assert (scope_prefix(), queue_tier(Tier.ENTERPRISE)) == ("", Tier.ENTERPRISE)
    with billed_as_batch_line("batch_req_x_0"):
        assert (scope_prefix(), queue_tier(Tier.ENTERPRISE)) == ("batch-", Tier.FREE)
    assert scope_prefix() == ""


def test_output_files_expire_as_the_batch_asked_and_are_swept(world: World) -> None:
    from functions.files.tenant_data import TenantFiles

    batch = world.batch(["a"], output_expires_after_s=3600)
    world.run(ScriptedLines({}))
    kept = world.store.get(world.tenant_id, batch.id)
    assert kept is not None and kept.output_file_id is not None
    output = world.files.backends.files.get_file(world.tenant_id, kept.output_file_id)
    assert output is not None and output.expires_at is not None
    assert 3590 <= (output.expires_at - output.created_at).total_seconds() <= 3600
    sweep = TenantFiles(world.files.backends).sweep(world.tenants.get_tenant, output.expires_at + timedelta(seconds=1))
    assert sweep.files_deleted == 1  # the output file; the input file has no expiry of its own
    assert world.files.backends.files.get_file(world.tenant_id, kept.output_file_id) is None


def test_the_sqlite_store_reads_line_results_page_by_page_in_order(world: World) -> None:
    batch = world.batch(["a"])
    for line in reversed(range(1203)):  # more than two pages of 500, written out of order
        world.store.record_line(
            LineResult(tenant_id=batch.tenant_id, batch_id=batch.id, line=line, custom_id=f"c{line}", request_id="r")
        )
    assert [r.line for r in world.store.lines(batch.tenant_id, batch.id)] == list(range(1203))

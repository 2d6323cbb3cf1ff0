"""The batch store contract, both adapters: SQLite on a temp file and DynamoDB + S3 against moto over HTTP.
A line's result is kept once, with the counts, in one write; status moves only from the statuses named and only by
the lease holder; the lease goes to one owner at a time; tenants never see each other's batches."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest

from shared.storage.batches import BatchStore, BatchUpdate, LineResult, StoredBatch, new_batch_id
from shared.storage.timestamps import utc_now
from tests.support.moto_server import new_pk_sk_table


def _open_aws(endpoint: str) -> BatchStore:
    import boto3

    from shared.storage.aws.batches import AwsBatchStore

    ddb, table, bucket = new_pk_sk_table(endpoint)
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    return AwsBatchStore(ddb, table, s3, bucket, retry_budget_s=30.0)


@pytest.fixture(params=["sqlite", "aws"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BatchStore]:
    if request.param == "sqlite":
        from shared.storage.sqlite.batches import SQLiteBatchStore

        opened: BatchStore = SQLiteBatchStore(tmp_path / "fleetchat.db")
    else:
        request.getfixturevalue("aws_env")
        opened = _open_aws(request.getfixturevalue("moto_endpoint"))
    try:
        yield opened
    finally:
        opened.close()


def _batch(tenant: str = "t1", seconds: int = 0) -> StoredBatch:
    now = utc_now() + timedelta(seconds=seconds)
    return StoredBatch(
        id=new_batch_id(), tenant_id=tenant, key_id="k1", endpoint="/v1/chat/completions", input_file_id="file-1",
        status="validating", created_at=now, expires_at=now + timedelta(hours=24), metadata={"job": "nightly"},
    )  # fmt: skip


def _line(batch: StoredBatch, line: int, *, ok: bool = True, body_bytes: int = 10) -> LineResult:
    return LineResult(
        tenant_id=batch.tenant_id, batch_id=batch.id, line=line, custom_id=f"c{line}", request_id=f"r{line}",
        status_code=200 if ok else 400, body={"text": "x" * body_bytes}, input_tokens=10, cached_tokens=4,
        output_tokens=3,
    )  # fmt: skip


def test_batches_are_kept_per_tenant_and_listed_newest_first(store: BatchStore) -> None:
    batches = [_batch(seconds=i) for i in range(3)]
    for batch in batches:
        store.create(batch)
    other = _batch("t2")
    store.create(other)
    assert store.get("t2", batches[0].id) is None
    assert store.get("t1", batches[0].id) == batches[0]
    listed = store.list("t1", after=None, limit=10)
    assert [b.id for b in listed] == [b.id for b in reversed(batches)]
    assert [b.id for b in store.list("t1", after=batches[2].id, limit=1)] == [batches[1].id]
    assert {b.id for b in store.active()} >= {*(b.id for b in batches), other.id}


def test_a_line_is_kept_once_and_counted_once(store: BatchStore) -> None:
    batch = _batch()
    store.create(batch)
    assert store.record_line(_line(batch, 0))
    assert not store.record_line(_line(batch, 0, ok=False))  # a second result for the same line changes nothing
    assert store.record_line(_line(batch, 2, ok=False))
    kept = store.get("t1", batch.id)
    assert kept is not None
    assert (kept.completed, kept.failed) == (1, 1)
    assert (kept.input_tokens, kept.cached_tokens, kept.output_tokens) == (20, 8, 6)
    assert [r.line for r in store.lines("t1", batch.id)] == [0, 2]
    assert next(iter(store.lines("t1", batch.id))).ok
    assert store.done_lines("t1", batch.id) == {0, 2}


def test_a_large_result_is_kept_whole(store: BatchStore) -> None:
    batch = _batch()
    store.create(batch)
    assert store.record_line(_line(batch, 0, body_bytes=600_000))  # past DynamoDB's item limit: S3 keeps it
    (kept,) = store.lines("t1", batch.id)
    assert len(kept.body["text"]) == 600_000  # type: ignore[index]


def test_lines_racing_for_one_line_number_count_once(store: BatchStore) -> None:
    batch = _batch()
    store.create(batch)
    with ThreadPoolExecutor(4) as pool:
        written = list(pool.map(lambda _: store.record_line(_line(batch, 7)), range(4)))
    assert written.count(True) == 1
    kept = store.get("t1", batch.id)
    assert kept is not None and kept.completed == 1


def test_the_lease_goes_to_one_owner_until_it_lapses(store: BatchStore) -> None:
    batch = _batch()
    store.create(batch)
    now = utc_now()
    assert store.claim("t1", batch.id, "a", now + timedelta(seconds=30), now)
    assert not store.claim("t1", batch.id, "b", now + timedelta(seconds=30), now)
    assert store.claim("t1", batch.id, "a", now + timedelta(seconds=60), now)  # renewed by its holder
    later = now + timedelta(seconds=61)
    assert store.claim("t1", batch.id, "b", later + timedelta(seconds=30), later)  # lapsed: taken over
    assert not store.claim("t1", "batch_0", "b", later, later)


def test_status_moves_only_from_the_statuses_named_and_by_the_lease_holder(store: BatchStore) -> None:
    batch = _batch()
    store.create(batch)
    now = utc_now()
    store.claim("t1", batch.id, "a", now + timedelta(seconds=30), now)
    start = BatchUpdate(status="in_progress", in_progress_at=now, total=5, model="smollm2")
    assert store.advance("t1", batch.id, start, from_statuses=frozenset({"validating"}), owner="b") is None
    moved = store.advance("t1", batch.id, start, from_statuses=frozenset({"validating"}), owner="a")
    assert moved is not None and (moved.status, moved.total, moved.model) == ("in_progress", 5, "smollm2")
    store.record_line(_line(batch, 0))
    cancel = BatchUpdate(status="cancelling", cancelling_at=now)
    assert store.advance("t1", batch.id, cancel, from_statuses=frozenset({"validating"}), owner=None) is None
    cancelled = store.advance("t1", batch.id, cancel, from_statuses=frozenset({"in_progress"}), owner=None)
    assert cancelled is not None and cancelled.completed == 1  # the counts survive a status write
    # The runner, still holding the lease, cannot move a batch that was cancelled meanwhile back to finalizing.
    finalize = BatchUpdate(status="finalizing", finalizing_at=now)
    assert store.advance("t1", batch.id, finalize, from_statuses=frozenset({"in_progress"}), owner="a") is None
    done = BatchUpdate(status="cancelled", cancelled_at=now, output_file_id="file-out")
    final = store.advance("t1", batch.id, done, from_statuses=frozenset({"cancelling"}), owner="a")
    assert final is not None and final.output_file_id == "file-out"
    assert batch.id not in {b.id for b in store.active()}
    assert not store.claim("t1", batch.id, "a", now + timedelta(seconds=30), now)  # final: nobody runs it


def test_erasure_removes_the_tenants_batches_and_lines(store: BatchStore) -> None:
    mine, theirs = _batch(), _batch("t2")
    store.create(mine)
    store.create(theirs)
    store.record_line(_line(mine, 0, body_bytes=600_000))
    assert store.delete_tenant("t1") == 1
    assert store.get("t1", mine.id) is None and list(store.lines("t1", mine.id)) == []
    assert mine.id not in {b.id for b in store.active()}
    assert store.get("t2", theirs.id) is not None

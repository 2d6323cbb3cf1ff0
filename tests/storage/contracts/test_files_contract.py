"""The files store contract, both adapters: SQLite on a temp file and DynamoDB items against moto over HTTP.
Quota holds inside the write (racing uploads cannot both take the last slot); tenants never see each other's files."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest

from shared.storage.files import Attachment, FileQuota, FileStore, QuotaExceeded, StoredFile, StoredVectorStore
from shared.storage.timestamps import utc_now
from tests.support.moto_server import new_pk_sk_table

ROOMY = FileQuota(max_files=100, max_total_bytes=10_000)


def _open_aws(endpoint: str) -> FileStore:
    from shared.storage.aws.files import AwsFileStore

    ddb, table, _ = new_pk_sk_table(endpoint)
    return AwsFileStore(ddb, table, retry_budget_s=30.0)


@pytest.fixture(params=["sqlite", "aws"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FileStore]:
    if request.param == "sqlite":
        from shared.storage.sqlite.files import SQLiteFileStore

        opened: FileStore = SQLiteFileStore(tmp_path / "fleetchat.db")
    else:
        request.getfixturevalue("aws_env")
        opened = _open_aws(request.getfixturevalue("moto_endpoint"))
    try:
        yield opened
    finally:
        opened.close()


def _file(tenant: str, file_id: str, size: int = 10, seconds: int = 0) -> StoredFile:
    return StoredFile(
        id=file_id, tenant_id=tenant, filename=f"{file_id}.md", purpose="assistants", bytes=size, kind="markdown",
        sha256="0" * 64, created_at=utc_now() + timedelta(seconds=seconds),
    )  # fmt: skip


def test_files_are_kept_per_tenant_listed_newest_first_and_deleted(store: FileStore) -> None:
    for i in range(3):
        store.add_file(_file("t1", f"file-{i}", seconds=i), ROOMY)
    store.add_file(_file("t2", "file-x"), ROOMY)
    assert store.get_file("t2", "file-0") is None and store.get_file("t1", "file-0") is not None
    newest = store.list_files("t1", purpose=None, after=None, limit=10, newest_first=True)
    assert [f.id for f in newest] == ["file-2", "file-1", "file-0"]
    page = store.list_files("t1", purpose=None, after="file-2", limit=1, newest_first=True)
    assert [f.id for f in page] == ["file-1"]
    assert store.list_files("t1", purpose="user_data", after=None, limit=10, newest_first=True) == []
    assert store.usage("t1") == (3, 30)
    assert store.delete_file("t1", "file-1") and not store.delete_file("t1", "file-1")
    assert store.usage("t1") == (2, 20) and not store.delete_file("t2", "file-0")
    assert store.tenants() == ["t1", "t2"]


def test_quota_on_count_and_bytes_refuses_and_writes_nothing(store: FileStore) -> None:
    quota = FileQuota(max_files=2, max_total_bytes=25)
    store.add_file(_file("t1", "file-a", size=10), quota)
    with pytest.raises(QuotaExceeded) as caught:
        store.add_file(_file("t1", "file-b", size=20), quota)
    assert caught.value.what == "bytes"
    store.add_file(_file("t1", "file-c", size=10), quota)
    with pytest.raises(QuotaExceeded) as caught:
        store.add_file(_file("t1", "file-d", size=1), quota)
    assert caught.value.what == "files"
    assert store.usage("t1") == (2, 20) and store.get_file("t1", "file-b") is None


def test_racing_uploads_cannot_both_take_the_last_slot(store: FileStore) -> None:
    quota = FileQuota(max_files=3, max_total_bytes=10_000)

    def add(i: int) -> bool:
        try:
            store.add_file(_file("t1", f"file-{i}"), quota)
            return True
        except QuotaExceeded:
            return False

    with ThreadPoolExecutor(8) as pool:
        added = list(pool.map(add, range(8)))
    assert sum(added) == 3 and store.usage("t1")[0] == 3


def _vs(tenant: str, store_id: str) -> StoredVectorStore:
    now = utc_now()
    return StoredVectorStore(
        id=store_id, tenant_id=tenant, name="docs", created_at=now, last_active_at=now,
        embedding_model="text-embedding-minilm", metadata={"team": "a"}, expires_after_days=7,
    )  # fmt: skip


def test_attachments_are_idempotent_finish_once_and_resume_from_pending(store: FileStore) -> None:
    store.add_file(_file("t1", "file-a"), ROOMY)
    store.create_vector_store(_vs("t1", "vs_1"))
    assert store.get_vector_store("t2", "vs_1") is None
    assert store.get_vector_store("t1", "vs_1").metadata == {"team": "a"}
    first = store.attach(Attachment(tenant_id="t1", vector_store_id="vs_1", file_id="file-a", created_at=utc_now()))
    again = store.attach(Attachment(tenant_id="t1", vector_store_id="vs_1", file_id="file-a", created_at=utc_now()))
    assert again.created_at == first.created_at and again.status == "in_progress"
    assert [(a.tenant_id, a.file_id) for a in store.pending()] == [("t1", "file-a")]
    done = first.model_copy(update={"status": "completed", "chunks": 3, "usage_bytes": 99})
    assert store.finish(done) and not store.finish(done)  # only an in_progress attachment is finished
    assert list(store.pending()) == []
    assert store.get_attachment("t1", "vs_1", "file-a").chunks == 3
    assert [a.vector_store_id for a in store.attachments_of_file("t1", "file-a")] == ["vs_1"]


def test_attachment_states_are_each_files_status_and_attributes_in_one_store(store: FileStore) -> None:
    store.create_vector_store(_vs("t1", "vs_1"))
    store.create_vector_store(_vs("t1", "vs_2"))
    for file_id, attributes in (("file-a", {"team": "x", "year": 2024}), ("file-b", {})):
        store.add_file(_file("t1", file_id), ROOMY)
        store.attach(Attachment(tenant_id="t1", vector_store_id="vs_1", file_id=file_id, created_at=utc_now(),
                                attributes=attributes))  # fmt: skip
    store.attach(Attachment(tenant_id="t1", vector_store_id="vs_2", file_id="file-b", created_at=utc_now()))
    done = store.get_attachment("t1", "vs_1", "file-a").model_copy(update={"status": "completed", "chunks": 1})
    assert store.finish(done)
    states = store.attachment_states("t1", "vs_1")
    assert states == {"file-a": ("completed", {"team": "x", "year": 2024}), "file-b": ("in_progress", {})}
    assert states == {a.file_id: (a.status, a.attributes) for a in store.list_attachments("t1", "vs_1")}
    assert store.attachment_states("t2", "vs_1") == {} and list(store.attachment_states("t1", "vs_2")) == ["file-b"]


def test_deleting_a_file_or_a_store_takes_its_attachments(store: FileStore) -> None:
    store.add_file(_file("t1", "file-a"), ROOMY)
    store.add_file(_file("t1", "file-b"), ROOMY)
    store.create_vector_store(_vs("t1", "vs_1"))
    for file_id in ("file-a", "file-b"):
        store.attach(Attachment(tenant_id="t1", vector_store_id="vs_1", file_id=file_id, created_at=utc_now()))
    store.delete_file("t1", "file-a")
    assert [a.file_id for a in store.list_attachments("t1", "vs_1")] == ["file-b"]
    assert store.delete_vector_store("t1", "vs_1") and store.list_attachments("t1", "vs_1") == []
    assert list(store.pending()) == []


def test_one_ingestion_lease_at_a_time_renewed_by_its_owner_taken_over_when_it_lapses(store: FileStore) -> None:
    store.add_file(_file("t1", "file-a"), ROOMY)
    store.create_vector_store(_vs("t1", "vs_1"))
    first = store.attach(Attachment(tenant_id="t1", vector_store_id="vs_1", file_id="file-a", created_at=utc_now()))
    now = utc_now()
    lease = now + timedelta(seconds=30)
    assert store.claim("t1", "vs_1", "file-a", "gw-1", lease, now)
    assert not store.claim("t1", "vs_1", "file-a", "gw-2", lease, now)  # another replica leaves it alone
    assert store.claim("t1", "vs_1", "file-a", "gw-1", lease + timedelta(seconds=30), now)  # the owner renews
    assert not store.claim("t2", "vs_1", "file-a", "gw-2", lease, now)  # another tenant's id: nothing to claim
    later = lease + timedelta(seconds=31)  # past the renewed lease: gw-1 died
    assert store.claim("t1", "vs_1", "file-a", "gw-2", later + timedelta(seconds=30), later)
    assert not store.claim("t1", "vs_1", "file-a", "gw-1", later + timedelta(seconds=30), later)  # it lost the lease
    # Racing claims on a free lease: exactly one wins.
    store.attach(Attachment(tenant_id="t1", vector_store_id="vs_1", file_id="file-b", created_at=utc_now()))
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda n: store.claim("t1", "vs_1", "file-b", f"gw-{n}", lease, now), range(8)))
    assert sum(won) == 1
    assert store.finish(first.model_copy(update={"status": "completed"}))
    assert not store.claim("t1", "vs_1", "file-a", "gw-2", later + timedelta(seconds=60), later)  # finished
    assert store.get_attachment("t1", "vs_1", "file-a").status == "completed"


def test_a_files_own_expiry_is_kept(store: FileStore) -> None:
    expiring = _file("t1", "file-out").model_copy(update={"expires_at": utc_now() + timedelta(hours=1)})
    store.add_file(expiring, ROOMY)
    store.add_file(_file("t1", "file-in"), ROOMY)
    kept = store.get_file("t1", "file-out")
    assert kept is not None and kept.expires_at is not None
    assert abs((kept.expires_at - expiring.expires_at).total_seconds()) < 1e-3  # type: ignore[operator]
    assert not kept.expired(utc_now()) and kept.expired(utc_now() + timedelta(hours=2))
    assert store.get_file("t1", "file-in").expires_at is None  # type: ignore[union-attr]

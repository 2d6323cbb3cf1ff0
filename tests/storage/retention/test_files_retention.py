"""Files, vector stores, chunks and vectors as account data, on the real embedded stores (SQLite, the data dir): the
retention sweep deletes them past the tenant's retention unless it is on legal hold; the account export carries them;
the GDPR erase removes every trace."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from functions.account_data import AccountData
from functions.files.backends import FileBackends, open_file_backends
from functions.files.tenant_data import TenantFiles
from functions.jobs.retention_sweep import run_sweep
from shared.fleet.tiers import Tier
from shared.settings import Settings
from shared.storage.accounts import TenantChanges
from shared.storage.files import Attachment, FileQuota, StoredFile, StoredVectorStore
from shared.storage.sqlite.accounts import SQLiteStore
from shared.storage.sqlite.conversations import SQLiteConversationStore
from shared.storage.sqlite.feedback import SQLiteFeedback
from shared.storage.timestamps import utc_now
from shared.storage.vector_index import IndexedChunk

QUOTA = FileQuota(max_files=100, max_total_bytes=10**9)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[FileBackends, SQLiteStore]]:
    settings = Settings(data_dir=tmp_path)
    backends, tenants = open_file_backends(settings), SQLiteStore(settings.db_path)
    try:
        yield backends, tenants
    finally:
        backends.close()
        tenants.close()


def _add(
    backends: FileBackends, tenant_id: str, file_id: str, days_old: int, body: bytes = b"# Notes\n\nHello."
) -> None:
    with tempfile.NamedTemporaryFile() as spooled:
        spooled.write(body)
        spooled.flush()
        backends.blobs.put(tenant_id, file_id, spooled.name)
    created = utc_now() - timedelta(days=days_old)
    record = StoredFile(
        id=file_id, tenant_id=tenant_id, filename=f"{file_id}.md", purpose="assistants", bytes=len(body),
        kind="markdown", sha256="0" * 64, created_at=created,
    )  # fmt: skip
    backends.files.add_file(record, QUOTA)


def _indexed_store(backends: FileBackends, tenant_id: str, store_id: str, file_id: str, idle_days: int) -> None:
    at = utc_now() - timedelta(days=idle_days)
    backends.files.create_vector_store(
        StoredVectorStore(
            id=store_id, tenant_id=tenant_id, name="s", created_at=at, last_active_at=at,
            embedding_model="text-embedding-minilm",
        )
    )  # fmt: skip
    backends.files.attach(Attachment(tenant_id=tenant_id, vector_store_id=store_id, file_id=file_id, created_at=at))
    chunk = IndexedChunk(f"{file_id}-00000", file_id, 0, "Hello.", 9, 15, "Notes", np.ones(4, dtype=np.float32))
    backends.index.replace_file(tenant_id, store_id, file_id, [chunk])


def test_the_sweep_deletes_past_retention_and_legal_hold_keeps_everything(
    setup: tuple[FileBackends, SQLiteStore],
) -> None:
    backends, tenants = setup
    free = tenants.create_tenant("free", Tier.FREE)  # 30 days
    held = tenants.create_tenant("held", Tier.FREE)
    tenants.update_tenant(held.id, TenantChanges(legal_hold=True))
    for tenant in (free, held):
        _add(backends, tenant.id, "file-old", days_old=40)
        _add(backends, tenant.id, "file-new", days_old=2)
        _indexed_store(backends, tenant.id, "vs_idle", "file-new", idle_days=31)
        _indexed_store(backends, tenant.id, "vs_busy", "file-new", idle_days=1)
    conversations = SQLiteConversationStore(tenants.path)
    try:
        dry = run_sweep(
            conversations, tenants.get_tenant, dry_run=True, show_progress=False, files=TenantFiles(backends)
        )
        assert (dry.files_deleted, dry.vector_stores_deleted) == (1, 1)
        assert backends.files.get_file(free.id, "file-old") is not None  # a dry run deletes nothing
        report = run_sweep(conversations, tenants.get_tenant, show_progress=False, files=TenantFiles(backends))
    finally:
        conversations.close()
    assert (report.files_deleted, report.vector_stores_deleted) == (1, 1)
    assert backends.files.get_file(free.id, "file-old") is None and backends.blobs.read(free.id, "file-old") is None
    assert backends.files.get_vector_store(free.id, "vs_idle") is None and backends.index.count(free.id, "vs_idle") == 0
    assert backends.index.count(free.id, "vs_busy") == 1 and backends.files.get_file(free.id, "file-new") is not None
    for file_id in ("file-old", "file-new"):  # legal hold: everything kept
        assert backends.files.get_file(held.id, file_id) is not None
    assert backends.index.count(held.id, "vs_idle") == 1


def _export(account: AccountData, tenant_id: str) -> dict:
    async def collect() -> bytes:
        return b"".join([part async for part in account.export(tenant_id)])

    return json.loads(asyncio.run(collect()))


def test_the_export_carries_files_and_stores_and_the_erase_removes_every_trace(
    setup: tuple[FileBackends, SQLiteStore],
) -> None:
    backends, tenants = setup
    owner, other = tenants.create_tenant("owner", Tier.PLUS), tenants.create_tenant("other", Tier.PLUS)
    for tenant in (owner, other):
        _add(backends, tenant.id, "file-a", days_old=0)
        _indexed_store(backends, tenant.id, "vs_a", "file-a", idle_days=0)
    conversations, feedback = SQLiteConversationStore(tenants.path), SQLiteFeedback(tenants.path)
    try:
        account = AccountData(conversations, feedback)
        account.files = TenantFiles(backends)
        exported = _export(account, owner.id)
        assert [f["id"] for f in exported["files"]] == ["file-a"]
        assert exported["files"][0]["content_base64"] == "IyBOb3RlcwoKSGVsbG8u"  # "# Notes\n\nHello."
        store = exported["vector_stores"][0]
        assert store["id"] == "vs_a" and [c["text"] for c in store["chunks"]] == ["Hello."]
        assert [f["id"] for f in store["files"]] == ["file-a"]

        account.erase(owner.id)
        assert backends.files.get_file(owner.id, "file-a") is None
        assert backends.files.get_vector_store(owner.id, "vs_a") is None
        assert backends.index.count(owner.id, "vs_a") == 0 and backends.blobs.read(owner.id, "file-a") is None
        assert _export(account, owner.id)["files"] == []
        assert backends.files.get_file(other.id, "file-a") is not None and backends.index.count(other.id, "vs_a") == 1
        account.erase(owner.id)  # idempotent
    finally:
        feedback.close()
        conversations.close()

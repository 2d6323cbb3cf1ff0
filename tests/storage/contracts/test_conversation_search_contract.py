"""The conversation search index, fed by the conversation store, on both homes: SQLite with LanceDB in the data dir,
and DynamoDB + S3 with LanceDB under the bucket (DynamoDB its commit store, SSE-KMS requested) on moto's server over
HTTP, as deployed. Every branch is searchable, only the tenant's own rows are read, deletes and erasure remove what
they must, and a lost index write is repaired from the store."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from functions.accounts.conversation_search import ConversationSearch
from functions.jobs.vector_maintenance import maintain_from_settings
from shared.settings import Settings
from shared.storage.conversations import AuditRecord, StoredMessage, new_conversation_id
from shared.storage.factory import open_conversation_store
from shared.storage.indexed_conversations import IndexedConversationStore
from tests.support.moto_server import unique_names

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["local", "aws"])
def home(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Settings, Any]:
    """(settings, S3 client or None)."""
    if request.param == "local":
        return Settings(data_dir=tmp_path), None
    import boto3

    from shared.storage.aws.layout import AwsStoreConfig, ensure_resources

    request.getfixturevalue("aws_env")
    endpoint = request.getfixturevalue("moto_endpoint")
    table, bucket = unique_names()
    commits = f"{table}-commits"
    ensure_resources(
        AwsStoreConfig(table_name=table, bucket=bucket, endpoint_url=endpoint, vector_commit_table=commits)
    )
    settings = Settings(
        data_dir=tmp_path, conversation_store="aws", aws_endpoint_url=endpoint, conversations_table=table,
        conversations_bucket=bucket, conversations_kms_key_id="alias/fleetchat-storage",
        vectors={"commit_table": commits},
    )  # fmt: skip
    return settings, boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


@pytest.fixture
def store(home: tuple[Settings, Any]) -> Iterator[IndexedConversationStore]:
    opened = open_conversation_store(home[0])
    try:
        yield opened
    finally:
        opened.close()


def msg(role: str, content: str, **fields: Any) -> StoredMessage:
    return StoredMessage(role=role, content=content, created_at=NOW, **fields)  # type: ignore[arg-type]


def start(store: IndexedConversationStore, tenant: str, *messages: StoredMessage, title: str = "t") -> str:
    conversation_id = new_conversation_id()
    store.append_turn(
        tenant, conversation_id, expected_version=0, messages=list(messages), expires_at=None, render_version=3,
        title=title, now=NOW,
    )  # fmt: skip
    return conversation_id


def found(store: IndexedConversationStore, tenant: str, query: str) -> list[tuple[str, int, str]]:
    store.flush()
    results = ConversationSearch(store, store.index).search(tenant, query, 20, now=NOW)
    return [(hit.conversation_id, hit.message_id, hit.role) for hit in results.data]


def index_objects(home: tuple[Settings, Any]) -> list[str]:
    settings, s3 = home
    if s3 is None:
        root = settings.data_dir / "conversation-search"
        return [str(p) for p in root.rglob("*") if p.is_file()] if root.exists() else []
    prefix = settings.vectors.conversation_search_prefix + "/"
    listed = s3.list_objects_v2(Bucket=settings.conversations_bucket, Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", [])]


def test_what_the_user_said_and_was_told_is_found_best_first_with_the_words_marked(
    store: IndexedConversationStore,
) -> None:
    bread = start(
        store, "t1", msg("system", "You bake bread."), msg("user", "How do I bake sourdough bread at home?"),
        msg("assistant", "Feed the starter the night before, then mix flour and water."), title="Bread",
    )  # fmt: skip
    start(store, "t1", msg("user", "Plan a trip to Lisbon"), msg("assistant", "Day one: Alfama."))

    assert found(store, "t1", "sourdough bread") == [(bread, 1, "user")]  # the system message is not searched
    assert found(store, "t1", "starters") == [(bread, 2, "assistant")]  # stems match, as the engine reads them
    results = ConversationSearch(store, store.index).search("t1", "baking breads", 5, now=NOW)
    hit = results.data[0]
    assert hit.title == "Bread" and hit.snippet == "How do I bake sourdough bread at home?"
    assert [hit.snippet[s.start : s.end] for s in hit.highlights] == ["bake", "bread"]
    assert found(store, "t1", "the and of") == []  # stop words alone find nothing
    assert found(store, "t1", "zeppelin") == []


def test_a_tenant_finds_only_its_own_conversations(store: IndexedConversationStore) -> None:
    mine = start(store, "t1", msg("user", "my secret recipe for ramen"))
    start(store, "t2", msg("user", "their secret recipe for ramen"))
    assert found(store, "t1", "ramen") == [(mine, 0, "user")]
    assert found(store, "t3", "ramen") == []


def test_every_branch_is_searchable_and_a_rewritten_tail_replaces_its_rows(store: IndexedConversationStore) -> None:
    conversation_id = start(store, "t1", msg("user", "Name a colour"), msg("assistant", "Crimson"))
    meta = store.append_turn(
        "t1", conversation_id, expected_version=1, messages=[msg("user", "Name a fruit"), msg("assistant", "Quince")],
        expires_at=None, render_version=3, parent=-1, now=NOW,
    )  # fmt: skip
    assert meta.message_count == 4
    # The first branch is no longer the active one; its words are still found, by their ids.
    assert found(store, "t1", "crimson") == [(conversation_id, 1, "assistant")]
    assert found(store, "t1", "quince") == [(conversation_id, 3, "assistant")]

    store.append_turn(
        "t1", conversation_id, expected_version=2, messages=[msg("user", "Name a tree"), msg("assistant", "Larch")],
        expires_at=None, render_version=3, keep=2, now=NOW,
    )  # fmt: skip
    assert found(store, "t1", "quince") == []
    assert found(store, "t1", "larch") == [(conversation_id, 3, "assistant")]


def test_deleting_a_conversation_or_erasing_the_account_removes_it_from_search(
    home: tuple[Settings, Any], store: IndexedConversationStore
) -> None:
    soft = start(store, "t1", msg("user", "walrus facts"))
    hard = start(store, "t1", msg("user", "walrus habitats"))
    kept = start(store, "t2", msg("user", "walrus diets"))
    assert {c for c, _, _ in found(store, "t1", "walrus")} == {soft, hard}

    assert store.soft_delete("t1", soft, now=NOW)
    assert [c for c, _, _ in found(store, "t1", "walrus")] == [hard]
    audit = AuditRecord(at=NOW, actor="test", action="purge", tenant_id="t1", conversation_id=hard)
    assert store.hard_delete("t1", hard, audit)
    store.flush()
    assert found(store, "t1", "walrus") == [] and store.index.indexed_through("t1") == {}

    before = index_objects(home)
    start(store, "t1", msg("user", "walrus again"))
    store.flush()
    assert len(index_objects(home)) > len(before)
    store.erase_tenant("t1", AuditRecord(at=NOW, actor="test", action="erase", tenant_id="t1"))
    assert "t1" not in set(store.index.tenants())  # its table and files are gone at once
    assert found(store, "t2", "walrus") == [(kept, 0, "user")]  # another account's index is untouched


def test_an_expired_conversation_is_not_answered_before_the_sweep_removes_it(store: IndexedConversationStore) -> None:
    conversation_id = new_conversation_id()
    store.append_turn(
        "t1", conversation_id, expected_version=0, messages=[msg("user", "pangolin scales")],
        expires_at=NOW + timedelta(days=1), render_version=3, now=NOW,
    )  # fmt: skip
    store.flush()
    search = ConversationSearch(store, store.index)
    assert len(search.search("t1", "pangolin", 5, now=NOW).data) == 1
    assert search.search("t1", "pangolin", 5, now=NOW + timedelta(days=2)).data == []


class _DownIndex:
    def __init__(self, index: Any) -> None:
        self.index = index

    def add(self, *args: Any, **kwargs: Any) -> None:
        raise OSError("the index is unreachable")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.index, name)


def test_a_lost_index_write_never_fails_the_turn_and_the_maintenance_job_repairs_it(
    home: tuple[Settings, Any], store: IndexedConversationStore
) -> None:
    settings = home[0]
    down = IndexedConversationStore(store.store, _DownIndex(store.index), background=False)  # type: ignore[arg-type]
    missed = start(down, "t1", msg("user", "okapi stripes"), msg("assistant", "Okapis are giraffids."))
    assert down.failed_writes == 1 and store.get("t1", missed) is not None  # the turn is stored
    gone = start(store, "t1", msg("user", "okapi range"))
    store.flush()
    store.store.soft_delete("t1", gone, now=NOW)  # deleted past the index (a removal lost the same way)
    assert found(store, "t1", "okapi") == []  # the index missed one and the deleted one is never answered

    report = maintain_from_settings(settings)
    assert (report.search_tenants, report.search_reindexed, report.search_removed, report.search_failed) == (1, 1, 1, 0)
    assert sorted(found(store, "t1", "okapi")) == [(missed, 0, "user"), (missed, 1, "assistant")]
    assert store.index.indexed_through("t1") == {missed: 2}
    again = maintain_from_settings(settings)
    assert (again.search_reindexed, again.search_removed) == (0, 0)  # nothing left to repair


def test_a_turn_with_nothing_to_search_still_moves_the_watermark(
    home: tuple[Settings, Any], store: IndexedConversationStore
) -> None:
    parts = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]
    conversation_id = start(store, "t1", msg("user", "", content_parts=parts))  # an image alone: no words
    store.flush()
    assert store.index.indexed_through("t1") == {conversation_id: 1}
    assert found(store, "t1", "image") == []
    assert maintain_from_settings(home[0]).search_reindexed == 0  # nothing missed, so nothing indexed again

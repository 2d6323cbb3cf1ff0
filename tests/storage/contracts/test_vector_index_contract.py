"""The vector index contract on both homes of its one engine (LanceDB): a directory on disk, and S3 + DynamoDB (the
commit store) on moto's server over HTTP with SSE-KMS requested, as deployed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from functions.files.backends import open_vector_index
from shared.settings import Settings
from shared.storage.lance_vector_index import LanceVectorIndex
from shared.storage.vector_index import IndexedChunk
from tests.support.moto_server import unique_names


def _aws_settings(endpoint: str, **vectors: Any) -> tuple[Settings, Any]:
    import boto3

    from shared.storage.aws.layout import AwsStoreConfig, ensure_resources

    table, bucket = unique_names()
    # A commit table per bucket: Lance keys its commits by the path inside the bucket.
    commits = f"{table}-vector-commits"
    ensure_resources(
        AwsStoreConfig(table_name=table, bucket=bucket, endpoint_url=endpoint, vector_commit_table=commits)
    )
    settings = Settings(
        conversation_store="aws", aws_endpoint_url=endpoint, conversations_table=table, conversations_bucket=bucket,
        conversations_kms_key_id="alias/fleetchat-storage", vectors={"commit_table": commits, **vectors},
    )  # fmt: skip
    return settings, boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


@pytest.fixture(params=["local", "s3"])
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Settings, Any]]:
    """(settings, S3 client or None): the settings open the index where the gateway would."""
    if request.param == "local":
        yield Settings(data_dir=tmp_path), None
    else:
        request.getfixturevalue("aws_env")
        yield _aws_settings(request.getfixturevalue("moto_endpoint"))


@pytest.fixture
def index(home: tuple[Settings, Any]) -> Iterator[LanceVectorIndex]:
    opened = open_vector_index(home[0])
    try:
        yield opened
    finally:
        opened.close()


def _chunks(file_id: str, vectors: list[list[float]], text: str = "chunk") -> list[IndexedChunk]:
    return [
        IndexedChunk(f"{file_id}-{i:05d}", file_id, i, f"{text} {i}", i * 10, i * 10 + 7, "Head", np.array(v, "f4"))
        for i, v in enumerate(vectors)
    ]


def _stored_objects(home: tuple[Settings, Any]) -> list[str]:
    settings, s3 = home
    if s3 is None:
        root = settings.data_dir / "vectors"
        return [str(p) for p in root.rglob("*") if p.is_file()] if root.exists() else []
    listed = s3.list_objects_v2(Bucket=settings.conversations_bucket, Prefix=settings.vectors.prefix + "/")
    return [o["Key"] for o in listed.get("Contents", [])]


def test_search_finds_the_nearest_chunks_best_first_with_their_offsets(index: LanceVectorIndex) -> None:
    index.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[1, 0, 0], [0, 1, 0], [0.9, 0.1, 0]]))
    hits = index.search("t1", "vs1", np.array([1.0, 0.0, 0.0]), 2)
    assert [h.chunk_id for h in hits] == ["file-a-00000", "file-a-00002"]
    assert hits[0].score == pytest.approx(1.0, abs=1e-6) and hits[0].score > hits[1].score
    assert (hits[0].start, hits[0].end, hits[0].text, hits[0].heading) == (0, 7, "chunk 0", "Head")


def test_keyword_search_ranks_by_bm25_with_stemming_and_skips_chunks_sharing_no_word(index: LanceVectorIndex) -> None:
    texts = ["How to reset a forgotten password", "Billing runs monthly", "Passwords are reset by email", "Hello"]
    chunks = [
        IndexedChunk(f"f-{i}", "f", i, text, 0, len(text), None, np.array([1.0, float(i)], "f4"))
        for i, text in enumerate(texts)
    ]
    index.replace_file("t1", "vs1", "f", chunks)
    found = index.keyword_search("t1", "vs1", "resetting passwords?", 10)
    assert {h.chunk_id for h in found} == {"f-0", "f-2"} and all(h.score > 0 for h in found)
    assert index.keyword_search("t1", "vs1", "the", 10) == []  # a stop word alone matches nothing
    assert index.keyword_search("t1", "vs1", "", 10) == [] and index.keyword_search("t1", "nope", "reset", 3) == []
    assert index.keyword_search("t1", "vs1", "reset' OR 1=1 --", 10)  # quotes and operators are words, not syntax


def test_file_filters_apply_before_the_search_in_both_rankings(index: LanceVectorIndex) -> None:
    index.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[1, 0]] * 30, text="alpha"))
    index.replace_file("t1", "vs1", "file-b", _chunks("file-b", [[0.5, 0.5]], text="alpha"))
    only_b = index.search("t1", "vs1", np.array([1.0, 0.0]), 5, file_ids={"file-b"})
    assert [h.file_id for h in only_b] == ["file-b"]  # found though 30 nearer chunks of file-a are excluded
    assert [h.file_id for h in index.keyword_search("t1", "vs1", "alpha", 5, file_ids=["file-b"])] == ["file-b"]
    assert index.search("t1", "vs1", np.array([1.0, 0.0]), 5, file_ids=set()) == []


def test_replacing_a_file_replaces_all_its_chunks_and_moves_the_revision(index: LanceVectorIndex) -> None:
    index.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[1, 0], [0, 1], [1, 1]]))
    index.replace_file("t1", "vs1", "file-b", _chunks("file-b", [[1, 0]], text="other"))
    before = index.revision("t1", "vs1")
    index.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[0, 1]], text="new"))
    assert index.count("t1", "vs1", "file-a") == 1 and index.count("t1", "vs1") == 2
    assert [h.text for h in index.chunks("t1", "vs1", "file-a")] == ["new 0"]
    assert [h.text for h in index.chunks("t1", "vs1")] == ["new 0", "other 0"]
    assert index.revision("t1", "vs1") != before
    assert index.search("t1", "vs1", np.array([0.0, 1.0]), 5)[0].text == "new 0"


def test_a_store_keeps_its_dimensions(index: LanceVectorIndex) -> None:
    index.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[1, 0]]))
    with pytest.raises(ValueError, match="dimensions"):
        index.replace_file("t1", "vs1", "file-b", _chunks("file-b", [[1, 0, 0]]))
    with pytest.raises(ValueError, match="dimensions"):
        index.search("t1", "vs1", np.array([1.0, 0.0, 0.0]), 3)


def test_tenants_and_stores_never_see_each_others_chunks(index: LanceVectorIndex) -> None:
    index.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[1, 0]]))
    index.replace_file("t2", "vs1", "file-b", _chunks("file-b", [[1, 0]]))
    index.replace_file("t1", "vs2", "file-c", _chunks("file-c", [[1, 0]]))
    index.replace_file("odd tenant/..", "vs.1", "file-d", _chunks("file-d", [[1, 0]]))
    assert [h.file_id for h in index.search("t1", "vs1", np.array([1.0, 0.0]), 10)] == ["file-a"]
    assert [h.file_id for h in index.chunks("t2", "vs1")] == ["file-b"]
    assert sorted(index.stores()) == [("odd tenant/..", "vs.1"), ("t1", "vs1"), ("t1", "vs2"), ("t2", "vs1")]


def test_remove_drop_store_and_drop_tenant(index: LanceVectorIndex) -> None:
    index.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[1, 0]]))
    index.replace_file("t1", "vs1", "file-b", _chunks("file-b", [[0, 1]]))
    index.replace_file("t1", "vs2", "file-a", _chunks("file-a", [[1, 0]]))
    index.replace_file("t2", "vs3", "file-z", _chunks("file-z", [[1, 0]]))
    index.remove_file("t1", "vs1", "file-a")
    assert [h.file_id for h in index.chunks("t1", "vs1")] == ["file-b"]
    index.drop_store("t1", "vs1")
    assert index.count("t1", "vs1") == 0 and index.search("t1", "vs1", np.array([1.0, 0.0]), 3) == []
    index.drop_tenant("t1")
    assert index.count("t1", "vs2") == 0 and index.count("t2", "vs3") == 1


def test_erasing_a_tenant_leaves_no_vector_text_or_index_file_behind(
    index: LanceVectorIndex, home: tuple[Settings, Any]
) -> None:
    index.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[1, 0]] * 3, text="secret"))
    index.replace_file("t1", "vs2", "file-b", _chunks("file-b", [[1, 0]]))
    index.maintain("t1", "vs1")  # an index build and a compaction have written files of their own
    index.replace_file("t2", "vs1", "file-c", _chunks("file-c", [[1, 0]]))
    index.drop_tenant("t1")
    left = _stored_objects(home)
    assert left and not [key for key in left if "t1." in key]  # t2's table is all that remains
    assert index.keyword_search("t1", "vs1", "secret", 5) == [] and list(index.chunks("t1", "vs1")) == []


def test_a_deleted_files_rows_leave_the_tables_files_at_the_maintenance_pass(index: LanceVectorIndex) -> None:
    for n in range(5):
        index.replace_file("t1", "vs1", f"file-{n}", _chunks(f"file-{n}", [[1, float(n)]] * 20, text=f"doc{n}"))
    index.maintain("t1", "vs1", purge_now=True)  # one fragment now holds every file's rows
    index.remove_file("t1", "vs1", "file-2")
    report = index.maintain("t1", "vs1", purge_now=True)
    assert report.rows == 80 and report.compacted and report.versions_removed >= 1
    table = index._open("t1", "vs1")
    assert sum(f.physical_rows for f in table.to_lance().get_fragments()) == 80  # the deleted rows are gone
    assert len(table.list_versions()) == 1  # and so is every version that still held them


def test_an_approximate_index_is_built_past_its_threshold_and_search_stays_right(home: tuple[Settings, Any]) -> None:
    index = open_vector_index(home[0].model_copy(update={"vectors": home[0].vectors.model_copy(
        update={"ann_min_rows": 300})}))  # fmt: skip
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(400, 16)).astype("f4")
    index.replace_file("t1", "vs1", "f", _chunks("f", vectors.tolist()))
    assert index.maintain("t1", "vs1").vector_index == "built"
    assert index.maintain("t1", "vs1").vector_index == "updated"
    query = vectors[123] + 0.01
    assert index.search("t1", "vs1", query, 3)[0].chunk_id == "f-00123"
    assert index.keyword_search("t1", "vs1", "chunk", 3)  # BM25 still answers after maintenance
    index.close()


def test_vectors_of_named_chunks_come_back_normalised(index: LanceVectorIndex) -> None:
    index.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[3, 4], [0, 2]]))
    found = index.vectors("t1", "vs1", ["file-a-00000", "nope"])
    assert list(found) == ["file-a-00000"]
    np.testing.assert_allclose(found["file-a-00000"], [0.6, 0.8], atol=1e-6)


def test_a_second_replica_sees_a_writers_changes_at_its_next_search(home: tuple[Settings, Any]) -> None:
    """Two gateway replicas on one home: what one writes, the other finds at its next search."""
    writer, reader = open_vector_index(home[0]), open_vector_index(home[0])
    writer.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[1, 0]]))
    assert len(reader.search("t1", "vs1", np.array([1.0, 0.0]), 5)) == 1
    writer.replace_file("t1", "vs1", "file-b", _chunks("file-b", [[1, 0]]))
    assert {h.file_id for h in reader.search("t1", "vs1", np.array([1.0, 0.0]), 5)} == {"file-a", "file-b"}
    writer.drop_store("t1", "vs1")
    assert reader.search("t1", "vs1", np.array([1.0, 0.0]), 5) == []


def test_concurrent_writers_to_one_store_all_land(home: tuple[Settings, Any]) -> None:
    """Ingestion of several files of one store at once, from two replicas (Lance retries a conflicting commit)."""
    replicas = [open_vector_index(home[0]), open_vector_index(home[0])]
    replicas[0].replace_file("t1", "vs1", "seed", _chunks("seed", [[1, 0]]))
    errors: list[BaseException] = []

    def ingest(n: int) -> None:
        try:
            replicas[n % 2].replace_file("t1", "vs1", f"file-{n}", _chunks(f"file-{n}", [[1, n]] * 3))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ingest, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert replicas[1].count("t1", "vs1") == 1 + 6 * 3

"""The vector index contract, both adapters: the embedded SQLite index on a temp file and the S3 index against moto's
S3 over HTTP (SSE-KMS requested on every put)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from shared.storage.vector_index import IndexedChunk, VectorIndex
from tests.support.moto_server import unique_names


def _open_s3(endpoint: str) -> VectorIndex:
    import boto3
    from botocore.config import Config

    from shared.storage.aws.vector_index import S3VectorIndex

    _, bucket = unique_names()
    # Patient timeouts: moto's first request loads its S3 backend, slow on busy shared cores.
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", config=Config(read_timeout=120))
    s3.create_bucket(Bucket=bucket)
    return S3VectorIndex(s3, bucket, kms_key_id="alias/fleetchat-storage")  # SSE-KMS as deployed (kms.tf)


@pytest.fixture(params=["sqlite", "s3"])
def index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorIndex]:
    if request.param == "sqlite":
        from shared.storage.sqlite.vector_index import SQLiteVectorIndex

        opened: VectorIndex = SQLiteVectorIndex(tmp_path / "fleetchat.db")
    else:
        request.getfixturevalue("aws_env")
        opened = _open_s3(request.getfixturevalue("moto_endpoint"))
    try:
        yield opened
    finally:
        opened.close()


def _chunks(file_id: str, vectors: list[list[float]], text: str = "chunk") -> list[IndexedChunk]:
    return [
        IndexedChunk(f"{file_id}-{i:05d}", file_id, i, f"{text} {i}", i * 10, i * 10 + 7, "Head", np.array(v, "f4"))
        for i, v in enumerate(vectors)
    ]


def test_search_finds_the_nearest_chunks_best_first_with_their_offsets(index: VectorIndex) -> None:
    index.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[1, 0, 0], [0, 1, 0], [0.9, 0.1, 0]]))
    hits = index.search("t1", "vs1", np.array([1.0, 0.0, 0.0]), 2)
    assert [h.chunk_id for h in hits] == ["file-a-00000", "file-a-00002"]
    assert hits[0].score == pytest.approx(1.0, abs=1e-6) and hits[0].score > hits[1].score
    assert (hits[0].start, hits[0].end, hits[0].text, hits[0].heading) == (0, 7, "chunk 0", "Head")


def test_replacing_a_file_replaces_all_its_chunks_and_moves_the_revision(index: VectorIndex) -> None:
    index.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[1, 0], [0, 1], [1, 1]]))
    before = index.revision("t1", "vs1")
    index.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[0, 1]], text="new"))
    assert index.count("t1", "vs1", "file-a") == 1
    assert [h.text for h in index.chunks("t1", "vs1")] == ["new 0"]
    assert index.revision("t1", "vs1") != before
    assert index.search("t1", "vs1", np.array([1.0, 0.0]), 5)[0].text == "new 0"


def test_tenants_and_stores_never_see_each_others_chunks(index: VectorIndex) -> None:
    index.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[1, 0]]))
    index.replace_file("t2", "vs1", "file-b", _chunks("file-b", [[1, 0]]))
    index.replace_file("t1", "vs2", "file-c", _chunks("file-c", [[1, 0]]))
    assert [h.file_id for h in index.search("t1", "vs1", np.array([1.0, 0.0]), 10)] == ["file-a"]
    assert [h.file_id for h in index.chunks("t2", "vs1")] == ["file-b"]


def test_remove_drop_store_and_drop_tenant(index: VectorIndex) -> None:
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


def test_vectors_of_named_chunks_come_back_normalised(index: VectorIndex) -> None:
    index.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[3, 4], [0, 2]]))
    found = index.vectors("t1", "vs1", ["file-a-00000", "nope"])
    assert list(found) == ["file-a-00000"]
    np.testing.assert_allclose(found["file-a-00000"], [0.6, 0.8], atol=1e-6)


def test_a_second_reader_sees_a_writers_changes(index: VectorIndex, tmp_path: Path) -> None:
    """Each gateway replica caches matrices: a write by one is seen by the others' next search."""
    index.replace_file("t1", "vs1", "file-a", _chunks("file-a", [[1, 0]]))
    assert len(index.search("t1", "vs1", np.array([1.0, 0.0]), 5)) == 1  # cached now
    index.replace_file("t1", "vs1", "file-b", _chunks("file-b", [[1, 0]]))
    assert {h.file_id for h in index.search("t1", "vs1", np.array([1.0, 0.0]), 5)} == {"file-a", "file-b"}

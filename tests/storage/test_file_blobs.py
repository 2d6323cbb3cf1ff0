"""File bodies, both adapters: the local directory (atomic rename) and S3 against moto over HTTP (SSE-KMS asked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.storage.files import BlobStore
from tests.support.moto_server import unique_names


@pytest.fixture(params=["local", "s3"])
def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> BlobStore:
    if request.param == "local":
        from shared.storage.file_blobs import LocalBlobStore

        return LocalBlobStore(tmp_path / "files")
    import boto3
    from botocore.config import Config

    from shared.storage.file_blobs import S3BlobStore

    request.getfixturevalue("aws_env")
    _, bucket = unique_names()
    endpoint = request.getfixturevalue("moto_endpoint")
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", config=Config(read_timeout=120))
    s3.create_bucket(Bucket=bucket)
    return S3BlobStore(s3, bucket, kms_key_id="alias/fleetchat-storage")


def test_bodies_round_trip_per_tenant_and_are_deleted(blobs: BlobStore, tmp_path: Path) -> None:
    source = tmp_path / "upload"
    body = bytes(range(256)) * 5000  # binary, larger than one read chunk
    source.write_bytes(body)
    blobs.put("t1", "file-a", str(source))
    blobs.put("t1", "file-b", str(source))
    blobs.put("t2", "file-a", str(source))
    assert blobs.read("t1", "file-a") == body
    assert b"".join(blobs.open_chunks("t1", "file-a")) == body
    assert blobs.read("t1", "file-zzz") is None and blobs.open_chunks("t1", "file-zzz") is None
    blobs.delete("t1", "file-a")
    assert blobs.read("t1", "file-a") is None and blobs.read("t1", "file-b") == body
    blobs.delete_tenant("t1")
    assert blobs.read("t1", "file-b") is None and blobs.read("t2", "file-a") == body
    blobs.delete("t1", "file-a")  # deleting what is gone is fine


def test_bodies_are_listed_with_their_age_for_the_orphan_sweep(blobs: BlobStore, tmp_path: Path) -> None:
    from datetime import timedelta

    from shared.storage.timestamps import utc_now

    source = tmp_path / "upload"
    source.write_bytes(b"body")
    before = utc_now() - timedelta(minutes=5)  # moto's and the disk's clocks round; both are this machine's
    blobs.put("t1", "file-a", str(source))
    blobs.put("t2", "file-b", str(source))
    listed = sorted(blobs.bodies(), key=lambda b: b.file_id)
    assert [(b.tenant_id, b.file_id, b.partial) for b in listed] == [("t1", "file-a", False), ("t2", "file-b", False)]
    assert all(before <= b.modified_at <= utc_now() + timedelta(minutes=5) for b in listed)
    blobs.delete_body(listed[0])
    assert blobs.read("t1", "file-a") is None and blobs.read("t2", "file-b") == b"body"

"""File bodies (`BlobStore`): a local directory embedded, the S3 bucket (SSE-KMS) deployed.

Local puts write a temporary file, fsync it and rename it into place (atomic on POSIX), so a crash never leaves a
half-written body under a file's name. S3 puts are atomic by themselves. Keys: `files/<tenant>/<file id>`.

`bodies()` lists every body with its modification time, for the retention job's orphan sweep (a body whose metadata
row was never written: a crash between the put and the insert, or a local put that never finished).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared.storage.aws.s3_encryption import s3_encryption
from shared.storage.files import StoredBody

_CHUNK = 1 << 20


class LocalBlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, tenant_id: str, file_id: str) -> Path:
        return self.root / tenant_id / file_id

    def put(self, tenant_id: str, file_id: str, source: str) -> None:
        target = self._path(tenant_id, file_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{file_id}.partial")
        with open(source, "rb") as reader, open(partial, "wb") as writer:
            shutil.copyfileobj(reader, writer, _CHUNK)
            writer.flush()
            os.fsync(writer.fileno())
        os.replace(partial, target)

    def read(self, tenant_id: str, file_id: str) -> bytes | None:
        try:
            return self._path(tenant_id, file_id).read_bytes()
        except FileNotFoundError:
            return None

    def open_chunks(self, tenant_id: str, file_id: str) -> Iterator[bytes] | None:
        path = self._path(tenant_id, file_id)
        if not path.exists():
            return None

        def chunks() -> Iterator[bytes]:
            with open(path, "rb") as reader:
                while block := reader.read(_CHUNK):
                    yield block

        return chunks()

    def delete(self, tenant_id: str, file_id: str) -> None:
        self._path(tenant_id, file_id).unlink(missing_ok=True)

    def delete_tenant(self, tenant_id: str) -> None:
        shutil.rmtree(self.root / tenant_id, ignore_errors=True)

    def bodies(self) -> Iterator[StoredBody]:
        if not self.root.is_dir():
            return
        for tenant in sorted(p for p in self.root.iterdir() if p.is_dir()):
            for path in sorted(tenant.iterdir()):
                partial = path.name.startswith(".") and path.name.endswith(".partial")
                file_id = path.name[1 : -len(".partial")] if partial else path.name
                try:
                    modified = datetime.fromtimestamp(path.stat().st_mtime, UTC)
                except FileNotFoundError:  # deleted while listed
                    continue
                yield StoredBody(tenant_id=tenant.name, file_id=file_id, modified_at=modified, partial=partial)

    def delete_body(self, body: StoredBody) -> None:
        path = self._path(body.tenant_id, body.file_id)
        (path.with_name(f".{body.file_id}.partial") if body.partial else path).unlink(missing_ok=True)


class S3BlobStore:
    """`s3` is a boto3 S3 client; bodies are encrypted with the deployment's KMS key (else SSE-S3)."""

    def __init__(self, s3: Any, bucket: str, *, kms_key_id: str | None = None) -> None:
        self._s3 = s3
        self._bucket = bucket
        self._sse = s3_encryption(kms_key_id)

    @staticmethod
    def key(tenant_id: str, file_id: str) -> str:
        return f"files/{tenant_id}/{file_id}"

    def put(self, tenant_id: str, file_id: str, source: str) -> None:
        self._s3.upload_file(source, self._bucket, self.key(tenant_id, file_id), ExtraArgs=self._sse)

    def read(self, tenant_id: str, file_id: str) -> bytes | None:
        try:
            return self._s3.get_object(Bucket=self._bucket, Key=self.key(tenant_id, file_id))["Body"].read()
        except self._s3.exceptions.NoSuchKey:
            return None

    def open_chunks(self, tenant_id: str, file_id: str) -> Iterator[bytes] | None:
        try:
            answer = self._s3.get_object(Bucket=self._bucket, Key=self.key(tenant_id, file_id))
        except self._s3.exceptions.NoSuchKey:
            return None
        return answer["Body"].iter_chunks(_CHUNK)

    def delete(self, tenant_id: str, file_id: str) -> None:
        self._s3.delete_object(Bucket=self._bucket, Key=self.key(tenant_id, file_id))

    def delete_tenant(self, tenant_id: str) -> None:
        pages = self._s3.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=f"files/{tenant_id}/")
        for page in pages:
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                self._s3.delete_objects(Bucket=self._bucket, Delete={"Objects": keys})

    def bodies(self) -> Iterator[StoredBody]:
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix="files/"):
            for item in page.get("Contents", []):
                parts = item["Key"].split("/")
                if len(parts) == 3 and parts[1] and parts[2]:
                    yield StoredBody(tenant_id=parts[1], file_id=parts[2], modified_at=item["LastModified"])

    def delete_body(self, body: StoredBody) -> None:
        self.delete(body.tenant_id, body.file_id)

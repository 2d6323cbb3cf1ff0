"""The deployed `VectorIndex`: one S3 object per indexed file, under `vectors/<tenant>/<store>/<file>`, SSE-KMS.

An object is the file's chunks as JSON (no vectors) and their float32 vectors, written by one PutObject: S3 makes the
put atomic, so a crashed ingestion leaves the previous object (or none), never half of one. Search lists the store's
objects and reads only those whose ETag changed since this process last read them; each gateway replica keeps its
own copy, and the bucket (Terraform's conversations bucket, with its KMS key) is the truth they share.

Object layout: 4 bytes big-endian header length, the JSON header `{"dims": D, "chunks": [...]}`, then N*D
little-endian float32.
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from shared.storage.aws.s3_encryption import s3_encryption
from shared.storage.vector_index import ChunkHit, IndexedChunk, normalised, top_k

PREFIX = "vectors/"


class _FileEntry:
    def __init__(self, etag: str, hits: list[ChunkHit], matrix: np.ndarray) -> None:
        self.etag = etag
        self.hits = hits
        self.matrix = matrix


def encode(chunks: Sequence[IndexedChunk]) -> bytes:
    matrix = normalised(np.stack([np.asarray(c.vector, dtype=np.float32) for c in chunks])) if chunks else None
    header = {
        "dims": 0 if matrix is None else int(matrix.shape[1]),
        "chunks": [
            {"file_id": c.file_id, "chunk_id": c.chunk_id, "seq": c.seq, "text": c.text, "start": c.start,
             "end": c.end, "heading": c.heading}
            for c in chunks
        ],
    }  # fmt: skip
    head = json.dumps(header, ensure_ascii=False).encode()
    body = b"" if matrix is None else matrix.astype("<f4").tobytes()
    return struct.pack(">I", len(head)) + head + body


def decode(data: bytes) -> tuple[list[ChunkHit], np.ndarray]:
    (length,) = struct.unpack(">I", data[:4])
    header = json.loads(data[4 : 4 + length])
    hits = [ChunkHit(**chunk) for chunk in header["chunks"]]
    dims = int(header["dims"]) or 1
    matrix = np.frombuffer(data[4 + length :], dtype="<f4").reshape(len(hits), dims)
    return hits, matrix


class S3VectorIndex:
    """Thread-safe (boto3 clients are; the cache has its lock). `s3` is a boto3 S3 client."""

    def __init__(self, s3: Any, bucket: str, *, kms_key_id: str | None = None) -> None:
        self._s3 = s3
        self._bucket = bucket
        self._sse = s3_encryption(kms_key_id)
        self._cache: dict[str, _FileEntry] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _prefix(tenant_id: str, store_id: str | None = None) -> str:
        return f"{PREFIX}{tenant_id}/" + ("" if store_id is None else f"{store_id}/")

    def _keys(self, prefix: str) -> Iterator[dict[str, Any]]:
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=prefix):
            yield from page.get("Contents", [])

    def replace_file(self, tenant_id: str, store_id: str, file_id: str, chunks: Sequence[IndexedChunk]) -> None:
        key = self._prefix(tenant_id, store_id) + file_id
        if not chunks:
            self.remove_file(tenant_id, store_id, file_id)
            return
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=encode(chunks), **self._sse)

    def remove_file(self, tenant_id: str, store_id: str, file_id: str) -> None:
        key = self._prefix(tenant_id, store_id) + file_id
        self._s3.delete_object(Bucket=self._bucket, Key=key)
        with self._lock:
            self._cache.pop(key, None)

    def _delete_prefix(self, prefix: str) -> None:
        keys = [{"Key": item["Key"]} for item in self._keys(prefix)]
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            self._s3.delete_objects(Bucket=self._bucket, Delete={"Objects": keys[start : start + 1000]})
        with self._lock:
            for key in [key for key in self._cache if key.startswith(prefix)]:
                del self._cache[key]

    def drop_store(self, tenant_id: str, store_id: str) -> None:
        self._delete_prefix(self._prefix(tenant_id, store_id))

    def drop_tenant(self, tenant_id: str) -> None:
        self._delete_prefix(self._prefix(tenant_id))

    def _entries(self, tenant_id: str, store_id: str) -> list[_FileEntry]:
        entries = []
        for item in self._keys(self._prefix(tenant_id, store_id)):
            key, etag = item["Key"], item["ETag"]
            with self._lock:
                cached = self._cache.get(key)
            if cached is None or cached.etag != etag:
                try:
                    answer = self._s3.get_object(Bucket=self._bucket, Key=key)
                except self._s3.exceptions.NoSuchKey:  # removed since the listing
                    continue
                hits, matrix = decode(answer["Body"].read())
                cached = _FileEntry(answer["ETag"], hits, matrix)
                with self._lock:
                    self._cache[key] = cached
            entries.append(cached)
        return entries

    def search(self, tenant_id: str, store_id: str, vector: np.ndarray, k: int) -> list[ChunkHit]:
        entries = [e for e in self._entries(tenant_id, store_id) if e.hits]
        if not entries:
            return []
        matrix = np.concatenate([e.matrix for e in entries])
        hits = [hit for e in entries for hit in e.hits]
        query = np.asarray(vector, dtype=np.float32)
        if matrix.shape[1] != query.shape[-1]:
            raise ValueError(f"query has {query.shape[-1]} dimensions; the index has {matrix.shape[1]}")
        return [hits[row].model_copy(update={"score": score}) for row, score in top_k(matrix, query, k)]

    def chunks(self, tenant_id: str, store_id: str) -> Iterator[ChunkHit]:
        entries = self._entries(tenant_id, store_id)
        for entry in sorted(entries, key=lambda e: e.hits[0].file_id if e.hits else ""):
            yield from entry.hits

    def count(self, tenant_id: str, store_id: str, file_id: str | None = None) -> int:
        entries = self._entries(tenant_id, store_id)
        return sum(1 for e in entries for hit in e.hits if file_id is None or hit.file_id == file_id)

    def revision(self, tenant_id: str, store_id: str) -> str:
        listing = sorted(f"{item['Key']}={item['ETag']}" for item in self._keys(self._prefix(tenant_id, store_id)))
        return hashlib.sha256("\n".join(listing).encode()).hexdigest()[:16]

    def vectors(self, tenant_id: str, store_id: str, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        wanted = set(chunk_ids)
        return {
            hit.chunk_id: entry.matrix[row]
            for entry in self._entries(tenant_id, store_id)
            for row, hit in enumerate(entry.hits)
            if hit.chunk_id in wanted
        }

    def close(self) -> None:
        self._cache.clear()

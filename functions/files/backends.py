"""The stores behind files and vector stores, opened from the settings: SQLite and the data dir locally; DynamoDB (the
conversations table) and S3 (the conversations bucket, SSE-KMS) deployed; the vector stores' LanceDB index in the data
dir locally and under the bucket deployed (DynamoDB its commit store)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.settings import Settings
from shared.storage.factory import lance_location
from shared.storage.files import BlobStore, FileStore
from shared.storage.lance_vector_index import LanceVectorIndex
from shared.storage.vector_index import VectorIndex


@dataclass
class FileBackends:
    files: FileStore
    blobs: BlobStore
    index: VectorIndex

    def close(self) -> None:
        self.index.close()
        self.files.close()


def open_file_backends(settings: Settings) -> FileBackends:
    if settings.conversation_store == "aws":
        from shared.storage.aws.files import AwsFileStore, aws_clients
        from shared.storage.file_blobs import S3BlobStore

        ddb, s3 = aws_clients(settings)
        bucket, key = settings.conversations_bucket, settings.conversations_kms_key_id
        return FileBackends(
            AwsFileStore(ddb, settings.conversations_table),
            S3BlobStore(s3, bucket, kms_key_id=key),
            open_vector_index(settings),
        )
    from shared.storage.file_blobs import LocalBlobStore
    from shared.storage.sqlite.files import SQLiteFileStore
    from shared.storage.sqlite.vector_chunks_move import move_sqlite_chunks

    files = SQLiteFileStore(settings.db_path)  # migrates the file first
    index = open_vector_index(settings)
    move_sqlite_chunks(settings.db_path, index)  # a data dir from before LanceDB: its chunks move over once
    return FileBackends(files, LocalBlobStore(settings.data_dir / "files"), index)


def vector_index_location(settings: Settings) -> tuple[str, dict[str, str]]:
    """(LanceDB URI, storage options) of the vector stores' tables (shared/storage/factory.py, `lance_location`)."""
    return lance_location(settings, settings.vectors.prefix, "vectors")


def open_vector_index(settings: Settings) -> LanceVectorIndex:
    uri, options = vector_index_location(settings)
    v = settings.vectors
    return LanceVectorIndex(
        uri,
        options or None,
        ann_min_rows=v.ann_min_rows,
        ann_nprobes=v.ann_nprobes,
        ann_refine_factor=v.ann_refine_factor,
        read_consistency_s=v.read_consistency_s,
        purge_grace_s=v.purge_grace_s,
        cache_bytes=v.index_cache_mb * 2**20,
    )

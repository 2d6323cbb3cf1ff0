"""The stores behind files and vector stores, opened from the settings: SQLite, the data dir and the embedded index
locally; DynamoDB (the conversations table), S3 (the conversations bucket, SSE-KMS) and the S3 index deployed."""

from __future__ import annotations

from dataclasses import dataclass

from shared.settings import Settings
from shared.storage.files import BlobStore, FileStore
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
        from shared.storage.aws.vector_index import S3VectorIndex
        from shared.storage.file_blobs import S3BlobStore

        ddb, s3 = aws_clients(settings)
        bucket, key = settings.conversations_bucket, settings.conversations_kms_key_id
        return FileBackends(
            AwsFileStore(ddb, settings.conversations_table),
            S3BlobStore(s3, bucket, kms_key_id=key),
            S3VectorIndex(s3, bucket, kms_key_id=key),
        )
    from shared.storage.file_blobs import LocalBlobStore
    from shared.storage.sqlite.files import SQLiteFileStore
    from shared.storage.sqlite.vector_index import SQLiteVectorIndex

    return FileBackends(
        SQLiteFileStore(settings.db_path),
        LocalBlobStore(settings.data_dir / "files"),
        SQLiteVectorIndex(settings.db_path),
    )

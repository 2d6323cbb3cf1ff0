"""The files store's contract: file metadata, vector stores and their file attachments (`FileStore`), and file
bodies (`BlobStore`). SQLite + a local directory embedded (shared/storage/sqlite/files.py, local_blobs.py); DynamoDB +
S3 deployed (aws_files.py).

Quota is checked inside the write that adds a file (`add_file`), so two uploads racing for the last slot cannot both
pass. Every read and write names the tenant: another tenant's id is simply not found.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import datetime
from typing import Any, Literal, NamedTuple, Protocol

from pydantic import BaseModel, Field

AttachmentStatus = Literal["in_progress", "completed", "cancelled", "failed"]


def new_id(prefix: str) -> str:
    """OpenAI-style ids: `file-…` for files, `vs_…` for vector stores (24 url-safe characters of randomness)."""
    return prefix + secrets.token_hex(12)


class StoredFile(BaseModel):
    id: str
    tenant_id: str
    filename: str = Field(max_length=512)
    purpose: str
    bytes: int = Field(ge=0)
    kind: str  # the sniffed type: pdf, docx, html, markdown, text
    sha256: str
    created_at: datetime
    # When the file goes (a batch's output file with `output_expires_after`): reads treat it as gone from then on and
    # the retention sweep deletes it. None: kept until deleted or past the tenant's retention.
    expires_at: datetime | None = None

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now


class StoredVectorStore(BaseModel):
    id: str
    tenant_id: str
    name: str
    created_at: datetime
    last_active_at: datetime
    embedding_model: str
    metadata: dict[str, str] = Field(default_factory=dict)
    expires_after_days: int | None = None


class Attachment(BaseModel):
    """One file in one vector store, with its ingestion state."""

    tenant_id: str
    vector_store_id: str
    file_id: str
    created_at: datetime
    status: AttachmentStatus = "in_progress"
    error_code: str | None = None
    error_message: str | None = None
    usage_bytes: int = 0
    chunks: int = 0
    key_id: str | None = None  # whose key attached it: ingestion resumed after a restart embeds as that key
    attributes: dict[str, str | float | bool] = Field(default_factory=dict)


class FileQuota(BaseModel):
    max_files: int
    max_total_bytes: int


class QuotaExceeded(Exception):
    """The tenant already holds its tier's number of files or bytes; nothing was written."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"{what} limit {limit}")
        self.what = what
        self.limit = limit


class AttachmentState(NamedTuple):
    status: str
    attributes: dict[str, Any]


class FileStore(Protocol):
    def add_file(self, record: StoredFile, quota: FileQuota) -> None:
        """Insert the file's metadata if the tenant stays within `quota` (raises QuotaExceeded)."""
        ...

    def get_file(self, tenant_id: str, file_id: str) -> StoredFile | None: ...

    def list_files(
        self, tenant_id: str, *, purpose: str | None, after: str | None, limit: int, newest_first: bool
    ) -> list[StoredFile]: ...

    def delete_file(self, tenant_id: str, file_id: str) -> bool:
        """The file's metadata and its attachments (the caller removes its body and index entries)."""
        ...

    def usage(self, tenant_id: str) -> tuple[int, int]:
        """(files, bytes) the tenant holds."""
        ...

    def create_vector_store(self, record: StoredVectorStore) -> None: ...

    def get_vector_store(self, tenant_id: str, store_id: str) -> StoredVectorStore | None: ...

    def list_vector_stores(
        self, tenant_id: str, *, after: str | None, limit: int, newest_first: bool
    ) -> list[StoredVectorStore]: ...

    def touch_vector_store(self, tenant_id: str, store_id: str, at: datetime) -> None: ...

    def delete_vector_store(self, tenant_id: str, store_id: str) -> bool: ...

    def attach(self, attachment: Attachment) -> Attachment:
        """Add the file to the store (in_progress); an existing attachment is returned unchanged (idempotent)."""
        ...

    def get_attachment(self, tenant_id: str, store_id: str, file_id: str) -> Attachment | None: ...

    def list_attachments(self, tenant_id: str, store_id: str) -> list[Attachment]: ...

    def attachment_states(self, tenant_id: str, store_id: str) -> dict[str, AttachmentState]:
        """Each attached file's status and attributes, by file id: what a search checks on every call, read without
        building whole records (a store may hold thousands of files)."""
        ...

    def attachments_of_file(self, tenant_id: str, file_id: str) -> list[Attachment]: ...

    def finish(self, attachment: Attachment) -> bool:
        """Write the final status of an in_progress attachment; False if it is gone (detached meanwhile)."""
        ...

    def detach(self, tenant_id: str, store_id: str, file_id: str) -> bool: ...

    def pending(self) -> Iterator[Attachment]:
        """Every in_progress attachment of every tenant: ingestion to resume after a restart."""
        ...

    def claim(self, tenant_id: str, store_id: str, file_id: str, owner: str, until: datetime, now: datetime) -> bool:
        """Take or renew the lease on ingesting an in_progress attachment, atomically: True when `owner` now holds
        it until `until`; False when another owner's lease runs past `now`, or the attachment is gone or finished.
        Two gateways resuming the same file: one wins, the other leaves it alone."""
        ...

    def tenants(self) -> list[str]:
        """Tenants holding files or vector stores (the retention sweep's walk)."""
        ...

    def close(self) -> None: ...


class StoredBody(BaseModel):
    """A body in the blob store, as the orphan sweep lists it (`partial`: a local put that never finished)."""

    tenant_id: str
    file_id: str
    modified_at: datetime
    partial: bool = False


class BlobStore(Protocol):
    """File bodies, by (tenant, file id). A put is atomic: a reader sees the whole body or none."""

    def put(self, tenant_id: str, file_id: str, source: str) -> None:
        """Store the body from the local file at `source`."""
        ...

    def read(self, tenant_id: str, file_id: str) -> bytes | None: ...

    def open_chunks(self, tenant_id: str, file_id: str) -> Iterator[bytes] | None: ...

    def delete(self, tenant_id: str, file_id: str) -> None: ...

    def delete_tenant(self, tenant_id: str) -> None: ...

    def bodies(self) -> Iterator[StoredBody]:
        """Every body of every tenant (the orphan sweep's walk: bodies whose metadata was never written)."""
        ...

    def delete_body(self, body: StoredBody) -> None:
        """Delete one listed body (a partial one too)."""
        ...

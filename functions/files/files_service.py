"""`/v1/files` behind the router: check an upload (size against the tier, type by content), store its body, then its
metadata within the tenant's quota; list, read and delete a tenant's files (another tenant's id is a 404).

Order of writes: the body first, then the metadata (the quota check is inside that write); a refused or failed
metadata write deletes the body again, so a 4xx leaves nothing behind. Deletion: functions/files/deletion.py.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from datetime import timedelta

from anyio import to_thread
from starlette.datastructures import UploadFile

from functions.accounts.auth import Caller
from functions.files.backends import FileBackends
from functions.files.deletion import delete_file
from functions.files.sniff import checked_kind
from shared.errors import InvalidRequestError, NotFoundError, PayloadTooLargeError, QuotaExceededError
from shared.fleet.tables import limits_for
from shared.fleet.tiers import TierLimits
from shared.storage.files import FileQuota, QuotaExceeded, StoredFile, new_id
from shared.storage.timestamps import utc_now
from shared.wire.files_api import FileDeleted, FileList, FileObject, FilePurpose

_HEAD = 8192  # bytes the type signatures need
PURPOSES: tuple[FilePurpose, ...] = ("assistants", "user_data", "batch")  # what a client may upload
INDEXED_PURPOSES: tuple[FilePurpose, ...] = ("assistants", "user_data")  # what a vector store may index
# A file the service writes itself (a batch's output) is kept whatever the tenant's file quota: the work is done.
UNBOUNDED = FileQuota(max_files=2**62, max_total_bytes=2**62)


def file_object(record: StoredFile) -> FileObject:
    return FileObject(
        id=record.id,
        bytes=record.bytes,
        created_at=int(record.created_at.timestamp()),
        filename=record.filename,
        purpose=record.purpose,
        expires_at=None if record.expires_at is None else int(record.expires_at.timestamp()),
    )


def not_found(file_id: str) -> NotFoundError:
    return NotFoundError(f"No such File object: {file_id}", param="file_id")


class FilesService:
    def __init__(self, backends: FileBackends) -> None:
        self.backends = backends

    def limits(self, caller: Caller) -> TierLimits:
        return limits_for(caller.tenant.tier, caller.tenant.limits)

    async def upload(self, caller: Caller, upload: UploadFile, purpose: str) -> FileObject:
        if purpose not in PURPOSES:
            raise InvalidRequestError(
                f"'{purpose}' is not a supported purpose here; supported: {', '.join(PURPOSES)}.",
                param="purpose",
                code="invalid_value",
            )
        limits = self.limits(caller)
        filename = os.path.basename(upload.filename or "") or "upload"
        size = upload.size if upload.size is not None else await to_thread.run_sync(_size, upload)
        if size > limits.max_file_bytes:
            raise PayloadTooLargeError(
                f"The file is {size} bytes; your tier accepts files of at most {limits.max_file_bytes} bytes.",
                param="file",
                code="file_too_large",
            )
        if size == 0:
            raise InvalidRequestError("The file is empty.", param="file", code="invalid_file")
        await upload.seek(0)
        body = await upload.read()
        kind = checked_kind(filename, upload.content_type, body[:_HEAD], body)
        if (purpose == "batch") != (kind == "jsonl"):
            raise InvalidRequestError(
                "A batch's input is a JSONL file (`.jsonl`) uploaded with purpose `batch`; a JSONL file has no other "
                "purpose here.",
                param="file" if purpose == "batch" else "purpose",
                code="invalid_file",
            )
        return file_object(await self._keep_new(caller, filename, purpose, kind, body))

    async def _keep_new(
        self, caller: Caller, filename: str, purpose: str, kind: str, body: bytes, expires_after_s: int | None = None
    ) -> StoredFile:
        """A new file of the caller's, stored within the tier's file quota (the 429 when past it)."""
        limits = self.limits(caller)
        now = utc_now()
        record = StoredFile(
            id=new_id("file-"),
            tenant_id=caller.tenant.id,
            filename=filename[:512],
            purpose=purpose,
            bytes=len(body),
            kind=kind,
            sha256=hashlib.sha256(body).hexdigest(),
            created_at=now,
            expires_at=None if expires_after_s is None else now + timedelta(seconds=expires_after_s),
        )
        quota = FileQuota(max_files=limits.max_files, max_total_bytes=limits.max_file_storage_bytes)
        await to_thread.run_sync(self._store, record, body, quota)
        return record

    def _store(self, record: StoredFile, body: bytes, quota: FileQuota) -> None:
        with tempfile.NamedTemporaryFile(prefix="fleetchat-upload-") as spooled:
            spooled.write(body)
            spooled.flush()
            self._put(record, spooled.name, quota)

    def _put(self, record: StoredFile, source: str, quota: FileQuota) -> None:
        """The body from the local file `source`, then the metadata within `quota` (a refused one deletes the body)."""
        b = self.backends
        b.blobs.put(record.tenant_id, record.id, source)
        try:
            b.files.add_file(record, quota)
        except QuotaExceeded as exc:
            b.blobs.delete(record.tenant_id, record.id)
            raise QuotaExceededError(
                f"Your tier keeps at most {exc.limit} {'files' if exc.what == 'files' else 'bytes of files'}; "
                "delete files to upload more.",
                retry_after_s=60,
                code="file_quota_exceeded",
                param="file",
            ) from exc
        except BaseException:
            b.blobs.delete(record.tenant_id, record.id)
            raise

    def keep_output(
        self, tenant_id: str, file_id: str, filename: str, chunks: Iterable[bytes], *, expires_after_s: int | None
    ) -> StoredFile:
        """Store a file the service wrote (a batch's output or error file, purpose `batch_output`) under `file_id`,
        spooled from `chunks`, expiring `expires_after_s` after it is written; blocking. Idempotent: a file already
        kept under that id is returned as it is."""
        existing = self.backends.files.get_file(tenant_id, file_id)
        if existing is not None:
            return existing
        digest, size = hashlib.sha256(), 0
        with tempfile.NamedTemporaryFile(prefix="fleetchat-output-") as spooled:
            for chunk in chunks:
                spooled.write(chunk)
                digest.update(chunk)
                size += len(chunk)
            spooled.flush()
            now = utc_now()
            expires = None if expires_after_s is None else now + timedelta(seconds=expires_after_s)
            record = StoredFile(
                id=file_id, tenant_id=tenant_id, filename=filename, purpose="batch_output", bytes=size, kind="jsonl",
                sha256=digest.hexdigest(), created_at=now, expires_at=expires,
            )  # fmt: skip
            self._put(record, spooled.name, UNBOUNDED)
        return record

    async def keep_tool_output(self, caller: Caller, filename: str, data: bytes, expires_after_s: int) -> StoredFile:
        """Store a file a sandboxed run offered (purpose `assistants_output`), checked by type as an upload is and
        counted against the caller's file quota: the upload's 400 or 429 when it is refused."""
        limits = self.limits(caller)
        if len(data) > limits.max_file_bytes:
            raise PayloadTooLargeError(
                f"The file is {len(data)} bytes; this tier keeps files of at most {limits.max_file_bytes} bytes.",
                code="file_too_large",
            )
        if not data:
            raise InvalidRequestError("The file is empty.", code="invalid_file")
        kind = checked_kind(filename, None, data[:_HEAD], data)
        return await self._keep_new(caller, filename, "assistants_output", kind, data, expires_after_s)

    async def get(self, caller: Caller, file_id: str) -> StoredFile:
        record = await to_thread.run_sync(self.backends.files.get_file, caller.tenant.id, file_id)
        if record is None or record.expired(utc_now()):  # an expired file is gone, swept or not yet
            raise not_found(file_id)
        return record

    async def list(self, caller: Caller, purpose: str | None, after: str | None, limit: int, order: str) -> FileList:
        records = await to_thread.run_sync(
            lambda: self.backends.files.list_files(
                caller.tenant.id, purpose=purpose, after=after, limit=limit + 1, newest_first=order == "desc"
            )
        )
        now = utc_now()
        data = [file_object(r) for r in records[:limit] if not r.expired(now)]
        return FileList(
            data=data,
            first_id=data[0].id if data else None,
            last_id=data[-1].id if data else None,
            has_more=len(records) > limit,
        )

    async def content(self, caller: Caller, file_id: str) -> tuple[StoredFile, Iterator[bytes]]:
        record = await self.get(caller, file_id)
        chunks = await to_thread.run_sync(self.backends.blobs.open_chunks, record.tenant_id, record.id)
        if chunks is None:
            raise not_found(file_id)
        return record, chunks

    async def delete(self, caller: Caller, file_id: str) -> FileDeleted:
        record = await self.get(caller, file_id)
        await to_thread.run_sync(delete_file, self.backends, record.tenant_id, record.id)
        return FileDeleted(id=file_id)


def _size(upload: UploadFile) -> int:
    upload.file.seek(0, os.SEEK_END)
    return upload.file.tell()

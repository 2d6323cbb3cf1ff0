"""A tenant's files, vector stores, chunks and vectors as account data: swept by the retention job (the tenant's
retention and legal hold, as its conversations), exported with the account, erased with it.

Retention: a file is kept `retention_days` (the tenant's, else its tier's) from its upload, a vector store that many
days from its last activity (or its own `expires_after`, whichever comes first); legal hold, or a tenant the tenant
store does not know, keeps everything. Deletion goes in functions/files/deletion.py's order, so an interrupted sweep or
erase leaves something the next run finishes.

Orphans: a body in the object store with no file metadata (a gateway that died between the body's put and the
metadata insert, a delete interrupted after the metadata, a local put that never finished) belongs to no file, so no
retention rule ever reaches it: `sweep_orphans` deletes it once it is older than the grace age (younger, it may be an
upload whose insert is a moment away). Legal hold and unknown tenants keep theirs, as above.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from pydantic import BaseModel

from functions.accounts.retention import expiry_for
from functions.files.backends import FileBackends
from functions.files.deletion import delete_file, delete_store
from functions.files.files_service import file_object
from functions.files.vector_stores import expires_at, store_object
from functions.files.vector_stores import file_object as attachment_object
from shared.storage.accounts import Tenant
from shared.storage.timestamps import utc_now
from shared.storage.vector_index import ChunkHit
from shared.wire.files_api import FileObject, VectorStoreFileObject, VectorStoreObject

TenantLookup = Callable[[str], Tenant | None]
_PAGE = 1000


class ExportedFile(FileObject):
    content_base64: str | None  # the body as uploaded (None: the body was already gone)


class ExportedVectorStore(VectorStoreObject):
    files: list[VectorStoreFileObject]
    chunks: list[ChunkHit]  # the indexed passages and their offsets (vectors are derived data: re-embedded on import)


class SweptFiles(BaseModel):
    files_deleted: int = 0
    vector_stores_deleted: int = 0
    orphan_bodies_deleted: int = 0


class TenantFiles:
    def __init__(self, backends: FileBackends) -> None:
        self.backends = backends

    def _all_files(self, tenant_id: str) -> Iterator:
        after = None
        while True:
            page = self.backends.files.list_files(tenant_id, purpose=None, after=after, limit=_PAGE, newest_first=False)
            yield from page
            if len(page) < _PAGE:
                return
            after = page[-1].id

    def _all_stores(self, tenant_id: str) -> Iterator:
        after = None
        while True:
            page = self.backends.files.list_vector_stores(tenant_id, after=after, limit=_PAGE, newest_first=False)
            yield from page
            if len(page) < _PAGE:
                return
            after = page[-1].id

    def erase(self, tenant_id: str) -> int:
        """Everything of the tenant's (GDPR erase); the number of files deleted. Idempotent."""
        self.backends.index.drop_tenant(tenant_id)
        for store in list(self._all_stores(tenant_id)):
            self.backends.files.delete_vector_store(tenant_id, store.id)
        files = list(self._all_files(tenant_id))
        for record in files:
            self.backends.files.delete_file(tenant_id, record.id)
        self.backends.blobs.delete_tenant(tenant_id)
        return len(files)

    def export_sections(self, tenant_id: str) -> dict[str, Iterator[BaseModel]]:
        """`files` (with their bodies) and `vector_stores` (with their files' status and their chunks), lazily."""

        def files() -> Iterator[BaseModel]:
            for record in self._all_files(tenant_id):
                body = self.backends.blobs.read(tenant_id, record.id)
                content = None if body is None else base64.b64encode(body).decode("ascii")
                yield ExportedFile(**file_object(record).model_dump(), content_base64=content)

        def stores() -> Iterator[BaseModel]:
            for store in self._all_stores(tenant_id):
                attachments = self.backends.files.list_attachments(tenant_id, store.id)
                yield ExportedVectorStore(
                    **store_object(store, attachments, utc_now()).model_dump(),
                    files=[attachment_object(a) for a in attachments],
                    chunks=list(self.backends.index.chunks(tenant_id, store.id)),
                )

        return {"files": files(), "vector_stores": stores()}

    def sweep(self, tenants: TenantLookup, now: datetime, *, dry_run: bool = False) -> SweptFiles:
        """Delete the files and vector stores past retention (see the module docstring)."""
        report = SweptFiles()
        for tenant_id in self.backends.files.tenants():
            tenant = tenants(tenant_id)
            if tenant is None or tenant.legal_hold:
                continue
            for store in list(self._all_stores(tenant_id)):
                ends = [t for t in (expiry_for(tenant, store.last_active_at), expires_at(store)) if t is not None]
                if ends and min(ends) <= now:
                    report.vector_stores_deleted += 1
                    if not dry_run:
                        delete_store(self.backends, tenant_id, store.id)
            for record in list(self._all_files(tenant_id)):
                ends = [t for t in (expiry_for(tenant, record.created_at), record.expires_at) if t is not None]
                if ends and min(ends) <= now:
                    report.files_deleted += 1
                    if not dry_run:
                        delete_file(self.backends, tenant_id, record.id)
        return report

    def sweep_orphans(self, tenants: TenantLookup, now: datetime, grace: timedelta, *, dry_run: bool = False) -> int:
        """Delete the bodies no file's metadata names that are older than `grace` (see the module docstring); how
        many (a dry run: would be)."""
        deleted = 0
        for body in self.backends.blobs.bodies():
            if now - body.modified_at < grace:
                continue
            if not body.partial and self.backends.files.get_file(body.tenant_id, body.file_id) is not None:
                continue
            tenant = tenants(body.tenant_id)
            if tenant is None or tenant.legal_hold:
                continue
            deleted += 1
            if not dry_run:
                self.backends.blobs.delete_body(body)
        return deleted

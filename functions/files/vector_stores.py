"""`/v1/vector_stores` behind the router: create, list, get and delete a tenant's vector stores, attach files (each
starts ingesting in the background), list a store's files with their status, detach. Another tenant's store or file
is a 404, as is a file that does not exist.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from anyio import to_thread

from functions.accounts.auth import Caller
from functions.files.backends import FileBackends
from functions.files.deletion import delete_store
from functions.files.files_service import INDEXED_PURPOSES
from functions.files.files_service import not_found as file_not_found
from functions.files.ingestion import Ingestor
from shared.errors import InvalidRequestError, NotFoundError
from shared.storage.files import Attachment, StoredVectorStore, new_id
from shared.storage.timestamps import utc_now
from shared.wire.files_api import (
    ExpiresAfter,
    FileCounts,
    LastError,
    VectorStoreCreate,
    VectorStoreDeleted,
    VectorStoreFileDeleted,
    VectorStoreFileList,
    VectorStoreFileObject,
    VectorStoreList,
    VectorStoreObject,
)

DEFAULT_EMBEDDING_MODEL = "text-embedding-minilm"


def store_not_found(store_id: str) -> NotFoundError:
    return NotFoundError(f"No such vector store: {store_id}", param="vector_store_id")


def expires_at(store: StoredVectorStore) -> datetime | None:
    if store.expires_after_days is None:
        return None
    return store.last_active_at + timedelta(days=store.expires_after_days)


def file_object(attachment: Attachment) -> VectorStoreFileObject:
    error = None
    if attachment.status == "failed":
        error = LastError(code=attachment.error_code or "server_error", message=attachment.error_message or "")  # type: ignore[arg-type]
    return VectorStoreFileObject(
        id=attachment.file_id,
        created_at=int(attachment.created_at.timestamp()),
        usage_bytes=attachment.usage_bytes,
        vector_store_id=attachment.vector_store_id,
        status=attachment.status,
        last_error=error,
        attributes=attachment.attributes or None,
    )


def store_object(store: StoredVectorStore, attachments: list[Attachment], now: datetime) -> VectorStoreObject:
    counts = FileCounts(total=len(attachments))
    for attachment in attachments:
        setattr(counts, attachment.status, getattr(counts, attachment.status) + 1)
    ends = expires_at(store)
    status = "expired" if ends is not None and ends <= now else "in_progress" if counts.in_progress else "completed"
    return VectorStoreObject(
        id=store.id,
        created_at=int(store.created_at.timestamp()),
        name=store.name,
        usage_bytes=sum(a.usage_bytes for a in attachments),
        file_counts=counts,
        status=status,
        last_active_at=int(store.last_active_at.timestamp()),
        metadata=store.metadata,
        expires_after=None
        if store.expires_after_days is None
        else ExpiresAfter(anchor="last_active_at", days=store.expires_after_days),
        expires_at=None if ends is None else int(ends.timestamp()),
    )


class VectorStoresService:
    def __init__(self, backends: FileBackends, ingestor: Ingestor) -> None:
        self.backends = backends
        self.ingestor = ingestor

    async def _object(self, store: StoredVectorStore) -> VectorStoreObject:
        attachments = await to_thread.run_sync(self.backends.files.list_attachments, store.tenant_id, store.id)
        return store_object(store, attachments, utc_now())

    async def owned(self, caller: Caller, store_id: str) -> StoredVectorStore:
        store = await to_thread.run_sync(self.backends.files.get_vector_store, caller.tenant.id, store_id)
        if store is None:
            raise store_not_found(store_id)
        return store

    async def create(self, caller: Caller, body: VectorStoreCreate) -> VectorStoreObject:
        for file_id in body.file_ids:  # every file checked before anything is written: a 404 changes nothing
            await self._attachable(caller, file_id)
        now = utc_now()
        store = StoredVectorStore(
            id=new_id("vs_"),
            tenant_id=caller.tenant.id,
            name=body.name or "",
            created_at=now,
            last_active_at=now,
            embedding_model=DEFAULT_EMBEDDING_MODEL,
            metadata=body.metadata or {},
            expires_after_days=None if body.expires_after is None else body.expires_after.days,
        )
        await to_thread.run_sync(self.backends.files.create_vector_store, store)
        for file_id in dict.fromkeys(body.file_ids):
            await self._attach(caller, store, file_id, {})
        return await self._object(store)

    async def get(self, caller: Caller, store_id: str) -> VectorStoreObject:
        return await self._object(await self.owned(caller, store_id))

    async def list(self, caller: Caller, after: str | None, limit: int, order: str) -> VectorStoreList:
        stores = await to_thread.run_sync(
            lambda: self.backends.files.list_vector_stores(
                caller.tenant.id, after=after, limit=limit + 1, newest_first=order == "desc"
            )
        )
        data = [await self._object(store) for store in stores[:limit]]
        return VectorStoreList(
            data=data,
            first_id=data[0].id if data else None,
            last_id=data[-1].id if data else None,
            has_more=len(stores) > limit,
        )

    async def delete(self, caller: Caller, store_id: str) -> VectorStoreDeleted:
        store = await self.owned(caller, store_id)
        await to_thread.run_sync(delete_store, self.backends, store.tenant_id, store.id)
        return VectorStoreDeleted(id=store_id)

    async def _attachable(self, caller: Caller, file_id: str) -> None:
        record = await to_thread.run_sync(self.backends.files.get_file, caller.tenant.id, file_id)
        if record is None:
            raise file_not_found(file_id)
        if record.purpose not in INDEXED_PURPOSES:
            raise InvalidRequestError(
                f"File {file_id} has purpose '{record.purpose}'; vector stores index "
                f"{', '.join(INDEXED_PURPOSES)} files.",
                param="file_id",
            )

    async def _attach(
        self, caller: Caller, store: StoredVectorStore, file_id: str, attributes: dict[str, str | float | bool]
    ) -> Attachment:
        attachment = Attachment(
            tenant_id=caller.tenant.id,
            vector_store_id=store.id,
            file_id=file_id,
            created_at=utc_now(),
            key_id=caller.key.id,
            attributes=attributes,
        )
        stored = await to_thread.run_sync(self.backends.files.attach, attachment)
        if stored.status == "in_progress":
            self.ingestor.start(stored, caller)
        return stored

    async def attach(
        self, caller: Caller, store_id: str, file_id: str, attributes: dict[str, str | float | bool] | None
    ) -> VectorStoreFileObject:
        store = await self.owned(caller, store_id)
        await self._attachable(caller, file_id)
        await to_thread.run_sync(self.backends.files.touch_vector_store, store.tenant_id, store.id, utc_now())
        return file_object(await self._attach(caller, store, file_id, attributes or {}))

    async def files(self, caller: Caller, store_id: str, status: str | None, limit: int, after: str | None,
                    order: str) -> VectorStoreFileList:  # fmt: skip
        store = await self.owned(caller, store_id)
        attachments = await to_thread.run_sync(self.backends.files.list_attachments, store.tenant_id, store.id)
        if status is not None:
            attachments = [a for a in attachments if a.status == status]
        if order == "desc":
            attachments.reverse()
        if after is not None:
            ids = [a.file_id for a in attachments]
            attachments = attachments[ids.index(after) + 1 :] if after in ids else []
        data = [file_object(a) for a in attachments[:limit]]
        return VectorStoreFileList(
            data=data,
            first_id=data[0].id if data else None,
            last_id=data[-1].id if data else None,
            has_more=len(attachments) > limit,
        )

    async def file(self, caller: Caller, store_id: str, file_id: str) -> VectorStoreFileObject:
        store = await self.owned(caller, store_id)
        attachment = await to_thread.run_sync(self.backends.files.get_attachment, store.tenant_id, store.id, file_id)
        if attachment is None:
            raise file_not_found(file_id)
        return file_object(attachment)

    async def detach(self, caller: Caller, store_id: str, file_id: str) -> VectorStoreFileDeleted:
        store = await self.owned(caller, store_id)
        b = self.backends
        attachment = await to_thread.run_sync(b.files.get_attachment, store.tenant_id, store.id, file_id)
        if attachment is None:
            raise file_not_found(file_id)
        await to_thread.run_sync(b.index.remove_file, store.tenant_id, store.id, file_id)
        await to_thread.run_sync(b.files.detach, store.tenant_id, store.id, file_id)
        return VectorStoreFileDeleted(id=file_id)

"""An attached file's indexed content, chunk by chunk (`GET /v1/vector_stores/{id}/files/{file_id}/content`): what a
citation's passage is read back from once the stored turn keeps only its offsets. Another tenant's store, or a file
not attached to the store, is a 404; a file still ingesting has no chunks yet (an empty page)."""

from __future__ import annotations

from anyio import to_thread

from functions.accounts.auth import Caller
from functions.files.backends import FileBackends
from functions.files.files_service import not_found as file_not_found
from functions.files.vector_stores import store_not_found
from shared.wire.files_api import FileContentPage, FileContentPart


def _content(backends: FileBackends, tenant_id: str, store_id: str, file_id: str) -> FileContentPage:
    if backends.files.get_vector_store(tenant_id, store_id) is None:
        raise store_not_found(store_id)
    if backends.files.get_attachment(tenant_id, store_id, file_id) is None:
        raise file_not_found(file_id)
    hits = list(backends.index.chunks(tenant_id, store_id, file_id))
    return FileContentPage(
        data=[FileContentPart(text=h.text, chunk_id=h.chunk_id, start_offset=h.start, end_offset=h.end) for h in hits]
    )


async def file_content(backends: FileBackends, caller: Caller, store_id: str, file_id: str) -> FileContentPage:
    return await to_thread.run_sync(_content, backends, caller.tenant.id, store_id, file_id)

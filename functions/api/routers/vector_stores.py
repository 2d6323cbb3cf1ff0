"""`/v1/vector_stores`: create, list, get and delete vector stores, attach and list their files, search one (OpenAI's
shapes; functions/files/vector_stores.py and search.py do the work)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query

from functions.accounts.auth import CurrentCaller
from functions.api.deps import RetrievalDep, VectorStoreSearchDep, VectorStoresServiceDep
from functions.api.openapi_description import error_responses
from functions.files.file_content import file_content
from shared.wire.files_api import (
    FILE_ID_PATTERN,
    VECTOR_STORE_ID_PATTERN,
    FileContentPage,
    SearchPage,
    SearchRequest,
    VectorStoreCreate,
    VectorStoreDeleted,
    VectorStoreFileCreate,
    VectorStoreFileDeleted,
    VectorStoreFileList,
    VectorStoreFileObject,
    VectorStoreList,
    VectorStoreObject,
)

router = APIRouter(prefix="/v1/vector_stores", tags=["vector stores"])
Limit = Annotated[int, Query(ge=1, le=100)]
Order = Literal["asc", "desc"]
After = Annotated[str | None, Query(max_length=64)]
StoreId = Annotated[str, Path(pattern=VECTOR_STORE_ID_PATTERN)]
FileId = Annotated[str, Path(pattern=FILE_ID_PATTERN)]


@router.post("", response_model=VectorStoreObject, responses=error_responses(404))
async def create_vector_store(
    body: VectorStoreCreate, caller: CurrentCaller, stores: VectorStoresServiceDep
) -> VectorStoreObject:
    return await stores.create(caller, body)


@router.get("", response_model=VectorStoreList)
async def list_vector_stores(
    caller: CurrentCaller, stores: VectorStoresServiceDep, limit: Limit = 20, order: Order = "desc", after: After = None
) -> VectorStoreList:
    return await stores.list(caller, after, limit, order)


@router.get("/{vector_store_id}", response_model=VectorStoreObject, responses=error_responses(404))
async def retrieve_vector_store(
    vector_store_id: StoreId, caller: CurrentCaller, stores: VectorStoresServiceDep
) -> VectorStoreObject:
    return await stores.get(caller, vector_store_id)


@router.delete("/{vector_store_id}", response_model=VectorStoreDeleted, responses=error_responses(404))
async def delete_vector_store(
    vector_store_id: StoreId, caller: CurrentCaller, stores: VectorStoresServiceDep
) -> VectorStoreDeleted:
    return await stores.delete(caller, vector_store_id)


@router.post("/{vector_store_id}/files", response_model=VectorStoreFileObject, responses=error_responses(404))
async def create_vector_store_file(
    vector_store_id: StoreId, body: VectorStoreFileCreate, caller: CurrentCaller, stores: VectorStoresServiceDep
) -> VectorStoreFileObject:
    return await stores.attach(caller, vector_store_id, body.file_id, body.attributes)


@router.get("/{vector_store_id}/files", response_model=VectorStoreFileList, responses=error_responses(404))
async def list_vector_store_files(
    vector_store_id: StoreId,
    caller: CurrentCaller,
    stores: VectorStoresServiceDep,
    limit: Limit = 20,
    order: Order = "desc",
    after: After = None,
    filter: Literal["in_progress", "completed", "failed", "cancelled"] | None = None,
) -> VectorStoreFileList:
    return await stores.files(caller, vector_store_id, filter, limit, after, order)


@router.get("/{vector_store_id}/files/{file_id}", response_model=VectorStoreFileObject, responses=error_responses(404))
async def retrieve_vector_store_file(
    vector_store_id: StoreId, file_id: FileId, caller: CurrentCaller, stores: VectorStoresServiceDep
) -> VectorStoreFileObject:
    return await stores.file(caller, vector_store_id, file_id)


@router.delete(
    "/{vector_store_id}/files/{file_id}", response_model=VectorStoreFileDeleted, responses=error_responses(404)
)
async def delete_vector_store_file(
    vector_store_id: StoreId, file_id: FileId, caller: CurrentCaller, stores: VectorStoresServiceDep
) -> VectorStoreFileDeleted:
    return await stores.detach(caller, vector_store_id, file_id)


@router.post("/{vector_store_id}/search", response_model=SearchPage, responses=error_responses(404, 429, 502, 503))
async def search_vector_store(
    vector_store_id: StoreId,
    body: SearchRequest,
    caller: CurrentCaller,
    search: VectorStoreSearchDep,
    retrieval: RetrievalDep,
) -> SearchPage:
    return await search.search_page(caller, vector_store_id, body, retrieval.search)  # chat's ranking by default


@router.get(
    "/{vector_store_id}/files/{file_id}/content", response_model=FileContentPage, responses=error_responses(404)
)
async def retrieve_vector_store_file_content(
    vector_store_id: StoreId, file_id: FileId, caller: CurrentCaller, stores: VectorStoresServiceDep
) -> FileContentPage:
    return await file_content(stores.backends, caller, vector_store_id, file_id)

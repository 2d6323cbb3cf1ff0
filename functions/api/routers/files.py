"""`/v1/files`: upload (multipart `file` + `purpose`), list, get, download and delete a tenant's files (OpenAI's
shapes; functions/files/files_service.py does the work)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, File, Form, Path, Query, UploadFile
from fastapi.responses import StreamingResponse

from functions.accounts.auth import CurrentCaller
from functions.api.deps import FilesServiceDep
from functions.api.openapi_description import error_responses
from functions.files.files_service import file_object
from shared.wire.files_api import FILE_ID_PATTERN, FileDeleted, FileList, FileObject

router = APIRouter(prefix="/v1/files", tags=["files"])
FileId = Annotated[str, Path(pattern=FILE_ID_PATTERN)]
_MEDIA_TYPES = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "html": "text/html; charset=utf-8",
    "markdown": "text/markdown; charset=utf-8",
    "text": "text/plain; charset=utf-8",
    "jsonl": "application/jsonl",  # a batch's input, output and error files
}


_CONTENT_TYPES = ("application/octet-stream", *(media.split(";")[0] for media in _MEDIA_TYPES.values()))


# Unset optional fields are left out rather than sent as null: OpenAI's schema types them without null.
@router.post("", response_model=FileObject, response_model_exclude_none=True, responses=error_responses(413, 429))
async def create_file(
    caller: CurrentCaller,
    files: FilesServiceDep,
    file: Annotated[
        UploadFile, File(description="The file: PDF, DOCX, HTML, Markdown or plain text; JSONL for a batch.")
    ],
    purpose: Annotated[str, Form(max_length=64)],
) -> FileObject:
    return await files.upload(caller, file, purpose)


@router.get("", response_model=FileList, response_model_exclude_none=True)
async def list_files(
    caller: CurrentCaller,
    files: FilesServiceDep,
    purpose: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 10_000,
    order: Literal["asc", "desc"] = "desc",
    after: Annotated[str | None, Query(max_length=64)] = None,
) -> FileList:
    return await files.list(caller, purpose, after, limit, order)


@router.get("/{file_id}", response_model=FileObject, response_model_exclude_none=True, responses=error_responses(404))
async def retrieve_file(file_id: FileId, caller: CurrentCaller, files: FilesServiceDep) -> FileObject:
    return file_object(await files.get(caller, file_id))


@router.get(
    "/{file_id}/content",
    response_class=StreamingResponse,
    responses={**error_responses(404), 200: {"content": {media: {} for media in _CONTENT_TYPES}}},
)
async def retrieve_file_content(file_id: FileId, caller: CurrentCaller, files: FilesServiceDep) -> StreamingResponse:
    record, chunks = await files.content(caller, file_id)
    return StreamingResponse(chunks, media_type=_MEDIA_TYPES.get(record.kind, "application/octet-stream"))


@router.delete("/{file_id}", response_model=FileDeleted, responses=error_responses(404))
async def delete_file(file_id: FileId, caller: CurrentCaller, files: FilesServiceDep) -> FileDeleted:
    return await files.delete(caller, file_id)

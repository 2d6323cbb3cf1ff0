"""Wire models of `/v1/files` and `/v1/vector_stores` (OpenAI's shapes), shared by the gateway and its clients.

Extension fields (not in OpenAI's API, ignored by its SDK but readable through `model_extra`): a search result's
`chunk_id`, `start_offset` and `end_offset` (character offsets of the passage in the file's extracted text), which is
what a citation points at.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

# OpenAI's purposes; the ones a vector store can index are `assistants` and `user_data` (file_search's).
FilePurpose = Literal["assistants", "user_data"]
VectorStoreFileStatus = Literal["in_progress", "completed", "cancelled", "failed"]
LastErrorCode = Literal["server_error", "unsupported_file", "invalid_file"]
Metadata = dict[str, str]
Attributes = dict[str, str | float | bool]
MAX_SEARCH_RESULTS = 50  # OpenAI's bound on max_num_results
# The ids the service hands out (`file-` / `vs_` and hex); a path id of another shape is a 400, not a lookup.
FILE_ID_PATTERN = r"^file-[A-Za-z0-9]{1,64}$"
VECTOR_STORE_ID_PATTERN = r"^vs_[A-Za-z0-9]{1,64}$"


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: Literal["uploaded", "processed", "error"] = "processed"
    expires_at: int | None = None
    status_details: str | None = None


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool = True


class FileCounts(BaseModel):
    in_progress: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    total: int = 0


class ExpiresAfter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    anchor: Literal["last_active_at"]
    days: int = Field(ge=1, le=365)


class VectorStoreCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")  # chunking_strategy and others: accepted, the service's own are used

    name: StrictStr | None = Field(default=None, max_length=256)
    file_ids: list[StrictStr] = Field(default_factory=list, max_length=500)
    metadata: dict[str, StrictStr] | None = Field(default=None, max_length=16)
    expires_after: ExpiresAfter | None = None


class VectorStoreObject(BaseModel):
    id: str
    object: Literal["vector_store"] = "vector_store"
    created_at: int
    name: str
    usage_bytes: int
    file_counts: FileCounts
    status: Literal["expired", "in_progress", "completed"]
    last_active_at: int | None = None
    metadata: Metadata | None = None
    expires_after: ExpiresAfter | None = None
    expires_at: int | None = None


class VectorStoreList(BaseModel):
    object: Literal["list"] = "list"
    data: list[VectorStoreObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class VectorStoreDeleted(BaseModel):
    id: str
    object: Literal["vector_store.deleted"] = "vector_store.deleted"
    deleted: bool = True


class VectorStoreFileCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    file_id: StrictStr = Field(min_length=1, max_length=64)
    attributes: dict[str, StrictStr | float | bool] | None = Field(default=None, max_length=16)


class LastError(BaseModel):
    code: LastErrorCode
    message: str


class VectorStoreFileObject(BaseModel):
    id: str
    object: Literal["vector_store.file"] = "vector_store.file"
    created_at: int
    usage_bytes: int
    vector_store_id: str
    status: VectorStoreFileStatus
    last_error: LastError | None = None
    attributes: Attributes | None = None


class VectorStoreFileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[VectorStoreFileObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class VectorStoreFileDeleted(BaseModel):
    id: str
    object: Literal["vector_store.file.deleted"] = "vector_store.file.deleted"
    deleted: bool = True


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # filters, ranking_options, rewrite_query: not applied (docs/files.md)

    query: StrictStr | list[StrictStr]
    max_num_results: int = Field(default=10, ge=1, le=MAX_SEARCH_RESULTS)

    def queries(self) -> list[str]:
        queries = [self.query] if isinstance(self.query, str) else list(self.query)
        return [q for q in queries if q.strip()]


class SearchContent(BaseModel):
    type: Literal["text"] = "text"
    text: str


class SearchResult(BaseModel):
    file_id: str
    filename: str
    score: float
    attributes: Attributes | None = None
    content: list[SearchContent]
    # Extension fields: where the passage is (a citation's target).
    chunk_id: str
    start_offset: int
    end_offset: int


class SearchPage(BaseModel):
    object: Literal["vector_store.search_results.page"] = "vector_store.search_results.page"
    search_query: list[str]
    data: list[SearchResult]
    has_more: bool = False
    next_page: str | None = None


class FileContentPart(BaseModel):
    """One indexed chunk of a vector store file: its text and (extension fields) where it is in the file's extracted
    text, the same `chunk_id` / offsets a search result and a citation name."""

    type: Literal["text"] = "text"
    text: str
    chunk_id: str
    start_offset: int
    end_offset: int


class FileContentPage(BaseModel):
    """`GET /v1/vector_stores/{id}/files/{file_id}/content` (OpenAI's shape): the file's parsed content, chunk by chunk
    in reading order; how the web chat shows a cited passage in its context after a reload (citations are stored
    without their text)."""

    object: Literal["vector_store.file_content.page"] = "vector_store.file_content.page"
    data: list[FileContentPart]
    has_more: bool = False
    next_page: str | None = None

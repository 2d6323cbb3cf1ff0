"""Wire models of `/v1/files` and `/v1/vector_stores` (OpenAI's shapes), shared by the gateway and its clients.

Extension fields (not in OpenAI's API, ignored by its SDK but readable through `model_extra`): a search result's
`chunk_id`, `start_offset` and `end_offset` (character offsets of the passage in the file's extracted text), which is
what a citation points at.

Search `filters` are OpenAI's comparison and compound filters over the attributes a file was attached with
(functions/files/filters.py applies them); `ranking_options` its `ranker` and `score_threshold`.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator

# OpenAI's purposes; the ones a vector store can index are `assistants` and `user_data` (file_search's); `batch` is
# a batch's JSONL input, `batch_output` a batch's output or error file (written by the batch runner, never uploaded),
# `assistants_output` a file the python tool's run offered (written by the gateway, never uploaded).
FilePurpose = Literal["assistants", "user_data", "batch", "batch_output", "assistants_output"]
VectorStoreFileStatus = Literal["in_progress", "completed", "cancelled", "failed"]
LastErrorCode = Literal["server_error", "unsupported_file", "invalid_file"]
Metadata = dict[str, str]
Attributes = dict[str, str | int | float | bool]
MAX_SEARCH_RESULTS = 50  # OpenAI's bound on max_num_results
MAX_ATTRIBUTES = 16  # OpenAI's bounds on a vector store file's attributes: 16 keys of 64 characters, values of 512
MAX_ATTRIBUTE_KEY = 64
MAX_ATTRIBUTE_VALUE = 512
MAX_FILTER_DEPTH = 4  # compound filters nested deeper than this are a 400 (a bound on the work one search can ask for)
MAX_FILTER_TERMS = 64  # comparisons in one filter, and values in one `in` / `nin` list
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


class ChunkingStrategy(BaseModel):
    """OpenAI's `chunking_strategy`: `auto` is the service's own chunker (docs/files.md); `static` sizes are refused
    rather than silently replaced by it."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["auto", "static"]
    static: dict[str, int] | None = None

    @model_validator(mode="after")
    def _auto_only(self) -> Self:
        if self.type != "auto" or self.static is not None:
            raise ValueError("only 'auto' is supported: files are chunked by the service's own chunker")
        return self


class VectorStoreCreate(BaseModel):
    """A field OpenAI does not define is a 400 naming it, as OpenAI refuses it."""

    model_config = ConfigDict(extra="forbid")

    name: StrictStr | None = Field(default=None, max_length=256)
    file_ids: list[StrictStr] = Field(default_factory=list, max_length=500)
    metadata: dict[str, StrictStr] | None = Field(default=None, max_length=16)
    expires_after: ExpiresAfter | None = None
    chunking_strategy: ChunkingStrategy | None = None
    description: StrictStr | None = None  # not kept here: refused when set

    @model_validator(mode="after")
    def _no_description(self) -> Self:
        if self.description is not None:
            raise ValueError("'description' is not kept here; put it in metadata")
        return self


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


AttributeValue = StrictStr | StrictBool | StrictInt | StrictFloat
Number = StrictInt | StrictFloat


def checked_attributes(attributes: dict[str, AttributeValue] | None) -> dict[str, AttributeValue] | None:
    """OpenAI's bounds on attribute keys and string values (the count is the field's own bound)."""
    for key, value in (attributes or {}).items():
        if not key or len(key) > MAX_ATTRIBUTE_KEY:
            raise ValueError(f"attribute keys must be 1 to {MAX_ATTRIBUTE_KEY} characters")
        if isinstance(value, str) and len(value) > MAX_ATTRIBUTE_VALUE:
            raise ValueError(f"attribute '{key}': string values are at most {MAX_ATTRIBUTE_VALUE} characters")
    return attributes


class VectorStoreFileCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file_id: StrictStr = Field(min_length=1, max_length=64)
    attributes: dict[str, AttributeValue] | None = Field(default=None, max_length=MAX_ATTRIBUTES)
    chunking_strategy: ChunkingStrategy | None = None

    @model_validator(mode="after")
    def _bounded(self) -> Self:
        checked_attributes(self.attributes)
        return self


class ComparisonFilter(BaseModel):
    """OpenAI's comparison filter: the file attribute `key` compared with `value` (a list for `in` / `nin`)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"]
    key: StrictStr = Field(min_length=1, max_length=MAX_ATTRIBUTE_KEY)
    value: AttributeValue | list[StrictStr | Number] = Field(union_mode="left_to_right")

    @model_validator(mode="after")
    def _value_fits_type(self) -> Self:
        listed = isinstance(self.value, list)
        if self.type in ("in", "nin"):
            if not listed or not self.value or len(self.value) > MAX_FILTER_TERMS:  # type: ignore[arg-type]
                raise ValueError(f"'{self.type}' compares with a list of 1 to {MAX_FILTER_TERMS} strings or numbers")
        elif listed:
            raise ValueError(f"'{self.type}' compares with one string, number or boolean, not a list")
        elif self.type in ("gt", "gte", "lt", "lte") and (isinstance(self.value, bool | str)):
            raise ValueError(f"'{self.type}' compares numbers: 'value' must be a number")
        return self


class CompoundFilter(BaseModel):
    """OpenAI's compound filter: its `filters` (comparisons or compounds) combined with `and` or `or`."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["and", "or"]
    filters: list[ComparisonFilter | CompoundFilter] = Field(min_length=1, max_length=MAX_FILTER_TERMS)

    @model_validator(mode="after")
    def _bounded(self) -> Self:
        depth, terms = _shape(self)
        if depth > MAX_FILTER_DEPTH or terms > MAX_FILTER_TERMS:
            limits = f"at most {MAX_FILTER_DEPTH} deep, with {MAX_FILTER_TERMS} comparisons at most"
            raise ValueError(f"filters nest {limits}")
        return self


def _shape(node: ComparisonFilter | CompoundFilter) -> tuple[int, int]:
    """(nesting depth, comparisons) of a filter."""
    if isinstance(node, ComparisonFilter):
        return 0, 1
    shapes = [_shape(child) for child in node.filters]
    return 1 + max(d for d, _ in shapes), sum(t for _, t in shapes)


Filter = ComparisonFilter | CompoundFilter


class RankingOptions(BaseModel):
    """OpenAI's search `ranking_options`: `ranker` `none` is vector search alone; `auto` (the default) and
    `default-2024-11-15` the hybrid ranking chat's retrieval uses (BM25 + vectors fused, re-ranked).
    `score_threshold` drops results scoring below it (the cosine similarity of passage and query)."""

    model_config = ConfigDict(extra="forbid")

    ranker: Literal["none", "auto", "default-2024-11-15"] = "auto"
    score_threshold: float = Field(default=0.0, ge=0.0, le=1.0)


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
    model_config = ConfigDict(extra="forbid")

    query: StrictStr | list[StrictStr]
    max_num_results: int = Field(default=10, ge=1, le=MAX_SEARCH_RESULTS)
    filters: Filter | None = None
    ranking_options: RankingOptions = Field(default_factory=RankingOptions)
    # OpenAI rewrites the query with a model first; here it is searched as given, so asking for a rewrite is refused
    # rather than silently ignored.
    rewrite_query: Literal[False] = False

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

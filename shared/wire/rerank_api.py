"""Wire models of `POST /v1/rerank` (and `/v2/rerank`): the shape Cohere, Jina and vLLM share, and vLLM's worker form.

A client sends a `query` and `documents`, gets back `results`, each an `index` into `documents` and a
`relevance_score` (higher is more relevant, in [0, 1]), best first, at most `top_n` of them. What each vendor adds:

- Cohere v1: documents may be objects (`{"text": ...}` or other fields, `rank_fields` naming which to rank on),
  `return_documents` (default false there), `max_chunks_per_doc`; v2: `max_tokens_per_doc` (default 4096).
- Jina: documents as strings or `{"text": ...}`, `return_documents` (default true there).
- vLLM: `top_n` 0 means every document, `truncate_prompt_tokens` cuts each (query, document) pair to that many tokens.

All of these are honoured. `return_documents` defaults to true (Jina's and vLLM's answer carries the documents; a
Cohere client that did not ask for them reads them as an optional field). The answer carries `usage` (vLLM's and
Jina's token count) and `meta.billed_units` (Cohere's), both from the tokens the gateway bills.

`WorkerRerankRequest`/`WorkerRerankResponse` are what a worker speaks: vLLM's `/v1/rerank` of a score model, or the
local worker's fused rank (gpu_workers/embeddings/fused_rerank.py)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

# Cohere's and Jina's ceiling on documents per request.
MAX_DOCUMENTS = 1000
# Cohere v2's default `max_tokens_per_doc`.
DEFAULT_MAX_TOKENS_PER_DOC = 4096
# Cohere v1's default `max_chunks_per_doc`: a long document is scored window by window, its best window its score.
DEFAULT_MAX_CHUNKS_PER_DOC = 10


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an unknown field is a 400 naming it

    model: str = Field(max_length=256)
    query: StrictStr
    documents: list[StrictStr | dict[str, Any]] = Field(max_length=MAX_DOCUMENTS)
    top_n: int | None = Field(default=None, ge=0)  # None or 0 (vLLM's "all"): every document
    return_documents: bool = True
    rank_fields: list[StrictStr] | None = None  # Cohere v1: the object fields a document is ranked on
    max_tokens_per_doc: int | None = Field(default=None, ge=1)  # Cohere v2: a document is cut to this many tokens
    max_chunks_per_doc: int | None = Field(default=None, ge=1)  # Cohere v1: windows scored per long document
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1)  # vLLM: each pair cut to this many (-1: model's)
    user: str | None = Field(default=None, max_length=256)


class RerankDocument(BaseModel):
    text: str | None = None


class RerankResult(BaseModel):
    index: int
    relevance_score: float
    document: dict[str, Any] | None = None  # a string document as `{"text": ...}`, an object as it was sent


class RerankUsage(BaseModel):
    prompt_tokens: int = 0
    total_tokens: int


class BilledUnits(BaseModel):
    input_tokens: int
    search_units: int  # Cohere's unit: one query over up to 100 document windows


class RerankMeta(BaseModel):
    api_version: dict[str, str] = {"version": "2"}
    billed_units: BilledUnits


class RerankResponse(BaseModel):
    id: str
    object: Literal["list"] = "list"
    model: str
    results: list[RerankResult]
    usage: RerankUsage
    meta: RerankMeta


class WorkerRerankRequest(BaseModel):
    """vLLM's rerank request: every document already fits the model with the query (the gateway split and cut them)."""

    model: str | None = None
    query: StrictStr
    documents: list[StrictStr] = Field(min_length=1)
    top_n: int = Field(default=0, ge=0)
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1)


class WorkerRerankResult(BaseModel):
    index: int
    relevance_score: float
    document: RerankDocument | None = None


class WorkerRerankUsage(BaseModel):
    total_tokens: int = Field(ge=0)


class WorkerRerankResponse(BaseModel):
    id: str = ""
    model: str
    usage: WorkerRerankUsage
    results: list[WorkerRerankResult]

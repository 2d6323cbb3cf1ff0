"""Wire models of retrieval in chat (docs/files.md, "Retrieval in chat"): the `file_search` tool and the
`vector_store_ids` extension a chat request may carry, the citations an answer returns (and its stored turn keeps),
and the `retrieval` report of what retrieval did."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.wire.files_api import Filter

# Set on every chat response whose request asked for retrieval: `used`, `empty`, `skipped` (over its latency budget or
# failed: answered without passages), `no_room` (the prompt left no room for passages).
RETRIEVAL_HEADER = "x-fleetchat-retrieval"
MAX_VECTOR_STORES = 8  # per request (OpenAI allows 2 per file_search tool; more costs a search each)
MAX_RESULTS = 50  # OpenAI's bound for `max_num_results`

RetrievalStatus = Literal["used", "empty", "skipped", "no_room"]


class HybridWeights(BaseModel):
    """How reciprocal rank fusion weighs the vector ranking against the keyword (BM25) ranking."""

    model_config = ConfigDict(extra="forbid")

    embedding_weight: float = Field(ge=0.0, le=100.0)
    text_weight: float = Field(ge=0.0, le=100.0)


class FileSearchRanking(BaseModel):
    """The `file_search` tool's `ranking_options`: both rankers are the service's hybrid ranking (re-ranked);
    `score_threshold` drops passages whose cosine similarity to the question is below it; `hybrid_search` weighs the
    fusion."""

    model_config = ConfigDict(extra="forbid")

    ranker: Literal["auto", "default-2024-11-15"] = "auto"
    score_threshold: float = Field(default=0.0, ge=0.0, le=1.0)
    hybrid_search: HybridWeights | None = None


class FileSearchTool(BaseModel):
    """OpenAI's `file_search` tool (the Responses API's shape), accepted in a chat request's `tools`: the gateway runs
    the search itself before the model answers (it is never sent to a worker as a tool). `filters` apply to the
    files' attributes in its stores."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["file_search"]
    vector_store_ids: list[str] = Field(min_length=1, max_length=MAX_VECTOR_STORES)
    max_num_results: int | None = Field(default=None, ge=1, le=MAX_RESULTS)
    filters: Filter | None = None
    ranking_options: FileSearchRanking | None = None


class Citation(BaseModel):
    """One passage the answer was given: `index` is its `[n]` marker in the context the model read."""

    index: int = Field(ge=1)
    vector_store_id: str
    file_id: str
    filename: str
    chunk_id: str
    start: int = Field(ge=0, description="Character offset of the passage in the file's extracted text.")
    end: int = Field(ge=0, description="End offset (exclusive) in the file's extracted text.")
    score: float = Field(description="The re-ranked relevance: cosine similarity of passage and question.")
    text: str | None = Field(default=None, description="The passage (in responses; not stored with the turn).")


class RetrievalReport(BaseModel):
    """The `retrieval` extension object of a chat response (the body, or a stream's first chunk)."""

    status: RetrievalStatus
    reason: str | None = None  # why it was skipped (e.g. "latency_budget", "embedding_unavailable")
    vector_store_ids: list[str]
    elapsed_ms: int
    budget_ms: int
    context_tokens: int = 0  # the bound on the tokens the passages added to the prompt
    withheld: int = 0  # passages the safety screen kept out of the context (see docs/files.md)
    # Of those, the passages the prompt-injection screen flagged (an instruction planted in the document).
    withheld_injection: int = 0
    citations: list[Citation] = Field(default_factory=list)

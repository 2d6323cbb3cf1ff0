"""Re-rank pools: the models `/v1/rerank` and retrieval's re-rank stage ask to score (query, document) pairs.

Deployed, a pool is a cross-encoder served by `vllm serve` (its `/v1/rerank`, gpu_workers/modal_app.py). Locally no
cross-encoder ships in a PyPI package and nothing is downloaded at run time, so the pool's local worker is the
embedding worker of `local.embedding_pool`, scoring with the fused rank (gpu_workers/embeddings/fused_rerank.py:
that model's cosine and BM25 over the documents sent, fused by reciprocal rank). Both speak vLLM's rerank protocol,
so the gateway cannot tell them apart; what they score with differs, and the pool's description says so.

The gateway prepares every request here before a worker sees it (`prepared_pairs`): each document's text (Cohere's
object documents and `rank_fields` included), cut to `max_tokens_per_doc`, split into windows that fit the model
beside the query (a long document scores as its best window, Cohere's `max_chunks_per_doc`), counted with the pool's
tokenizer, so admission charges the exact tokens and no worker ever refuses a pair for its length.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from pydantic import BaseModel, Field

from shared.errors import ContextLengthExceededError, InvalidRequestError
from shared.fleet.embedding_pools import DeployedEncoderModel, PackagedEmbeddingModel, packaged_tokenizer
from shared.fleet.pools import TokenPrice
from shared.wire.rerank_api import DEFAULT_MAX_CHUNKS_PER_DOC, DEFAULT_MAX_TOKENS_PER_DOC, RerankRequest
from shared.wire.schemas import ModelPricing

# How the ledger names a re-rank pool's entries: this prefix, then the pool (billed on the re-rank meter).
RERANK_LEDGER_PREFIX = "rerank:"
# [CLS] query [SEP] document [SEP]: the special tokens of one pair.
PAIR_SPECIAL_TOKENS = 3
# Tokens a window cut inside one long word leaves unused: its pieces may tokenize a little differently on their own.
WORD_CUT_MARGIN = 8
# Cohere's search unit: one query over up to this many document windows.
WINDOWS_PER_SEARCH_UNIT = 100


class LocalFusedRerank(BaseModel):
    """The local worker: the fused rank, served by the named embedding pool's worker with that pool's model."""

    embedding_pool: str


class RerankPool(BaseModel):
    name: str
    description: str
    # Tokens of one (query, document) pair, special tokens included: the cross-encoder's position table.
    max_pair_tokens: int = Field(ge=16)
    # The query's longest: the rest of the pair is left to the document.
    max_query_tokens: int = Field(ge=1)
    # The tokenizer both scorers share (files of a package: nothing downloaded), which the gateway counts with.
    tokenizer: PackagedEmbeddingModel
    local: LocalFusedRerank
    deployed: DeployedEncoderModel  # the hub cross-encoder `vllm serve` serves on a Modal GPU (its /v1/rerank)
    price: TokenPrice  # internal cost per million pair tokens (completion price unused)
    list_price: ModelPricing | None = None


@dataclass(frozen=True)
class PreparedPairs:
    """What the worker scores: `windows[i]` is a slice of document `owners[i]`'s text."""

    query: str
    documents: list[str]  # each document's text as ranked
    windows: list[str]
    owners: list[int]
    tokens: int  # every pair's tokens, special tokens included: what is charged

    def search_units(self) -> int:
        return max(1, math.ceil(len(self.windows) / WINDOWS_PER_SEARCH_UNIT))

    def document_scores(self, window_scores: list[float]) -> list[float]:
        """Each document's score: the best of its windows'."""
        best = [-math.inf] * len(self.documents)
        for owner, score in zip(self.owners, window_scores, strict=True):
            best[owner] = max(best[owner], score)
        return best


def document_texts(request: RerankRequest) -> list[str]:
    """Each document's text to rank: a string as is; an object's `text`, or its `rank_fields` as `field: value` lines
    (Cohere's rendering of structured documents)."""
    texts: list[str] = []
    for i, document in enumerate(request.documents):
        if isinstance(document, str):
            texts.append(document)
            continue
        fields = request.rank_fields or ["text"]
        missing = [field for field in fields if field not in document]
        if missing:
            hint = "" if request.rank_fields else "; name the fields to rank on with `rank_fields`"
            raise InvalidRequestError(
                f"'documents' item {i} has no field {missing[0]!r}{hint}.", param="documents", code="invalid_value"
            )
        values = {field: document[field] if isinstance(document[field], str) else json.dumps(document[field])
                  for field in fields}  # fmt: skip
        texts.append(values["text"] if fields == ["text"] else "\n".join(f"{k}: {v}" for k, v in values.items()))
    return texts


def prepared_pairs(pool: RerankPool, request: RerankRequest) -> PreparedPairs:
    """The request's (query, window) pairs and their tokens, or the 400 that explains why none can be scored."""
    if not request.query.strip():
        raise InvalidRequestError("'query' must contain text.", param="query", code="invalid_value")
    if not request.documents:
        raise InvalidRequestError("'documents' must not be empty.", param="documents", code="invalid_value")
    texts = document_texts(request)
    tokenizer = packaged_tokenizer(pool.tokenizer.directory())
    query_tokens = len(tokenizer.encode(request.query, add_special_tokens=False).ids)
    if query_tokens > pool.max_query_tokens:
        raise ContextLengthExceededError(
            f"The query has {query_tokens} tokens; the model `{pool.name}` takes at most {pool.max_query_tokens}, "
            "leaving the rest of each pair to the document.",
            param="query",
        )
    pair_limit = pool.max_pair_tokens
    if request.truncate_prompt_tokens is not None and request.truncate_prompt_tokens > 0:
        pair_limit = min(pair_limit, request.truncate_prompt_tokens)
    budget = pair_limit - query_tokens - PAIR_SPECIAL_TOKENS
    if budget < 1:
        raise InvalidRequestError(
            f"'truncate_prompt_tokens' ({pair_limit}) leaves no room for a document beside the query's "
            f"{query_tokens} tokens.",
            param="truncate_prompt_tokens",
            code="invalid_value",
        )
    # vLLM's truncation cuts a pair once: one window per document. Otherwise a long document is read in windows.
    cut_once = request.truncate_prompt_tokens is not None
    max_windows = 1 if cut_once else request.max_chunks_per_doc or DEFAULT_MAX_CHUNKS_PER_DOC
    max_doc_tokens = request.max_tokens_per_doc or DEFAULT_MAX_TOKENS_PER_DOC
    windows: list[str] = []
    owners: list[int] = []
    tokens = 0
    for i, encoding in enumerate(tokenizer.encode_batch(texts, add_special_tokens=False)):
        spans = _windows(encoding.offsets[:max_doc_tokens], encoding.word_ids[:max_doc_tokens], budget)
        for start, end, count in spans[:max_windows]:
            windows.append(texts[i][start:end])
            owners.append(i)
            tokens += query_tokens + count + PAIR_SPECIAL_TOKENS
    return PreparedPairs(request.query, texts, windows, owners, tokens)


def _windows(offsets: list[tuple[int, int]], word_ids: list[int | None], budget: int) -> list[tuple[int, int, int]]:
    """(first char, end char, tokens) of consecutive windows of at most `budget` tokens, each ending at a word's end
    (a word cut in two would tokenize differently on its own). A single word longer than a window (a URL, an encoded
    blob) is cut inside it, a few tokens short (`WORD_CUT_MARGIN` at most), so its pieces still fit when tokenized
    again. An empty
    document is one empty window."""
    if not offsets:
        return [(0, 0, 0)]
    spans: list[tuple[int, int, int]] = []
    start = 0
    while start < len(offsets):
        full = min(start + budget, len(offsets))
        end = full
        while end < len(offsets) and end > start and word_ids[end] is not None and word_ids[end] == word_ids[end - 1]:
            end -= 1
        if end == start:  # the window is all one word: cut inside it
            end = max(start + 1, full - min(WORD_CUT_MARGIN, (full - start) // 4))
        spans.append((offsets[start][0], offsets[end - 1][1], end - start))
        start = end
    return spans


def checked_worker_pairs(pool: RerankPool, query: str, documents: list[str]) -> list[int]:
    """Each (query, document) pair's tokens, or the 400 vLLM gives a pair longer than the model (the worker's check,
    the same as `vllm serve --max-model-len`)."""
    tokenizer = packaged_tokenizer(pool.tokenizer.directory())
    query_tokens = len(tokenizer.encode(query, add_special_tokens=False).ids)
    counts = [
        query_tokens + len(encoding.ids) + PAIR_SPECIAL_TOKENS
        for encoding in tokenizer.encode_batch(documents, add_special_tokens=False)
    ]
    for i, count in enumerate(counts):
        if count > pool.max_pair_tokens:
            raise ContextLengthExceededError(
                f"This model's maximum context length is {pool.max_pair_tokens} tokens, however the pair of the query "
                f"and document {i} has {count} tokens.",
                param="documents",
            )
    return counts

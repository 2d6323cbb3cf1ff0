"""Retrieval quality on public BEIR sets: each corpus ingested as the product ingests a file (the chunker, the title
heading in front of each chunk, all-MiniLM-L6-v2 run as the embedding worker runs it) into a search engine, then every
test query ranked by keywords alone (BM25), vectors alone, and chat's hybrid retrieval (functions/retrieval/hybrid.py:
RRF fusion, and the fusion re-ranked with MMR as chat uses it), and the local re-rank pool's scorer
(gpu_workers/embeddings/fused_rerank.py) on BM25's top 100 documents (BEIR's re-rank protocol) and as chat's re-rank
stage. nDCG@10 and recall@100 by ir-measures (pytrec_eval), against the published BM25, MiniLM and BM25+cross-encoder
figures. A document's rank is its best chunk's.

    fleetchat eval beir --set scifact --engine lancedb --engine sqlite-vec

Corpus embeddings are cached (keyed by the chunk texts and the model) so a second run, or a second engine, embeds
nothing. Engines: `lancedb` (the one the service runs, shared/storage/lance_vector_index.py) and `sqlite-vec`
(sqlite-vec's exact KNN + FTS5, the candidate it was chosen over; functions/offline/evals/beir/sqlite_vec_engine.py)."""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel
from rich.progress import Progress

from functions.files.chunking import chunk_text
from functions.files.ingestion import embedded_text
from functions.offline.evals.beir.data_sets import SETS, Document, Loaded, load
from functions.offline.evals.beir.in_process import IndexStores
from functions.retrieval.hybrid import HybridSearch
from shared.settings import RetrievalSettings
from shared.storage.vector_index import IndexedChunk

EngineName = Literal["lancedb", "sqlite-vec"]
Mode = Literal["keyword", "vector", "hybrid", "hybrid-reranked", "keyword-pool-reranked", "hybrid-pool-reranked"]
MODES: tuple[Mode, ...] = (
    "keyword", "vector", "hybrid", "hybrid-reranked", "keyword-pool-reranked", "hybrid-pool-reranked"
)  # fmt: skip
RERANK_POOL = "rerank-minilm"
TENANT, STORE = "beir", "vs_beir"
DEPTH = 100  # documents ranked per query (recall@100)
MAX_INPUT_TOKENS = 256  # all-MiniLM-L6-v2's input limit, as the embedding pool states it
DEFAULT_CACHE = Path.home() / ".cache" / "fleetchat" / "beir"


class ModeResult(BaseModel):
    mode: Mode
    ndcg_at_10: float
    recall_at_100: float
    p50_ms: float  # per query, in process, question embedding excluded


class EngineResult(BaseModel):
    engine: EngineName
    index_s: float  # writing every chunk (one replace_file per document)
    maintain_s: float  # the maintenance pass after (compaction, index builds)
    modes: list[ModeResult]


class SetResult(BaseModel):
    set: str
    documents: int
    chunks: int
    queries: int
    embed_s: float  # 0 when the cache had them
    published_bm25: float
    published_minilm: float
    published_bm25_cross_encoder: float = 0.0
    engines: list[EngineResult]


def _minilm_directory() -> Path:
    from functions.files.vector_stores import DEFAULT_EMBEDDING_MODEL
    from shared.fleet.tables import tables

    local = tables().embedding_pools[DEFAULT_EMBEDDING_MODEL].local
    assert local is not None
    return local.directory()


def _token_spans() -> Callable[[str], list[tuple[int, int]]]:
    from shared.fleet.embedding_pools import packaged_tokenizer

    tokenizer = packaged_tokenizer(_minilm_directory())

    def spans(text: str) -> list[tuple[int, int]]:
        return [tuple(offset) for offset in tokenizer.encode(text, add_special_tokens=False).offsets]

    return spans


def chunked(documents: list[Document]) -> list[tuple[str, Any, str]]:
    """(document id, chunk, the text embedded) for every chunk, as ingestion makes them."""
    spans = _token_spans()
    budget = MAX_INPUT_TOKENS - 56  # functions/files/ingestion.py: room for the heading line
    out = []
    for document in documents:
        for chunk in chunk_text(document.markdown(), spans, max_tokens=budget):
            out.append((document.id, chunk, embedded_text(chunk, spans, budget + 54)))
    return out


def embedded(texts: list[str], cache: Path, progress: Progress, label: str) -> tuple[np.ndarray, float]:
    """(vectors, seconds spent embedding): from the cache when these texts were embedded before."""
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    path = cache / f"minilm-{digest}.npy"
    if path.exists():
        return np.load(path), 0.0
    from gpu_workers.embeddings.encoder import SentenceEncoder

    encoder = SentenceEncoder(_minilm_directory(), threads=2)
    task = progress.add_task(f"{label}: embedding {len(texts)} texts", total=len(texts))
    started, parts = time.perf_counter(), []
    for first in range(0, len(texts), 256):
        parts.append(encoder.encode(texts[first : first + 256]))
        progress.advance(task, len(parts[-1]))
    vectors = np.concatenate(parts) if parts else np.zeros((0, 384), np.float32)
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors, time.perf_counter() - started


def open_engine(name: EngineName, directory: Path) -> Any:
    if name == "lancedb":
        from shared.storage.lance_vector_index import LanceVectorIndex

        return LanceVectorIndex(str(directory / "lance"))
    from functions.offline.evals.beir.sqlite_vec_engine import SqliteVecIndex

    return SqliteVecIndex(str(directory / "sqlite-vec.db"))


class InProcessPoolScorer:
    """The local re-rank pool's scorer in this process (`PassageReranker`, as functions/rerank_service.py serves it):
    the worker's fused relevance, with each text's vector from `vectors` (the texts embedded beforehand, as the worker
    would embed them) and the question's from `stores`."""

    def __init__(self, stores: IndexStores, vectors: dict[str, np.ndarray]) -> None:
        self.stores, self.vectors = stores, vectors

    async def scores(self, caller: Any, model: str, query: str, documents: list[str]) -> list[float]:
        from gpu_workers.embeddings.fused_rerank import bm25_scores, fused_relevance

        matrix = np.stack([self.vectors[text] for text in documents])
        relevance = fused_relevance(self.stores.question, matrix, bm25_scores(query, documents))
        return [float(score) for score in relevance]


def _documents_ranked(hits: list[Any]) -> list[str]:
    """Document ids in the order of their best chunk."""
    seen: dict[str, None] = {}
    for hit in hits:
        seen.setdefault(hit.file_id, None)
    return list(seen)[:DEPTH]


async def _rank(
    index: Any, hybrids: dict[str, HybridSearch], stores: IndexStores, scorer: InProcessPoolScorer, mode: Mode,
    text: str,
) -> list[str]:  # fmt: skip
    chunks_deep = 3 * DEPTH  # several chunks of one document can fill a ranking
    caller = SimpleNamespace(tenant=SimpleNamespace(id=TENANT))
    if mode == "keyword":
        return _documents_ranked(index.keyword_search(TENANT, STORE, text, chunks_deep))
    if mode == "vector":
        return _documents_ranked(index.search(TENANT, STORE, stores.question, chunks_deep))
    if mode == "keyword-pool-reranked":  # BEIR's protocol: BM25's top 100 documents, every chunk of them re-scored
        hits = index.keyword_search(TENANT, STORE, text, chunks_deep)
        top = set(_documents_ranked(hits))
        candidates = [hit for hit in hits if hit.file_id in top]
        if not candidates:  # no query word in any document
            return []
        scores = await scorer.scores(caller, RERANK_POOL, text, [hit.text for hit in candidates])
        order = sorted(range(len(candidates)), key=lambda i: -scores[i])
        return _documents_ranked([candidates[i] for i in order])
    hybrid = hybrids["pool" if mode == "hybrid-pool-reranked" else "built-in"]
    ref = SimpleNamespace(id=STORE, revision="0")
    if mode == "hybrid":
        passages = await hybrid.search(caller, [ref], text, chunks_deep, mode="fused")  # type: ignore[arg-type]
    else:  # chat's ranking: the fusion re-ranked by similarity to the question, with MMR; its top ten decide nDCG@10
        top = await hybrid.search(caller, [ref], text, 10, mode="hybrid")  # type: ignore[arg-type]
        rest = await hybrid.search(caller, [ref], text, chunks_deep, mode="fused")  # type: ignore[arg-type]
        passages = top + rest
    return _documents_ranked([p.hit for p in passages])


def _measured(loaded: Loaded, runs: dict[str, list[str]]) -> tuple[float, float]:
    import ir_measures
    from ir_measures import R, nDCG

    run = {q: {doc: float(DEPTH - i) for i, doc in enumerate(docs)} for q, docs in runs.items()}
    found = ir_measures.calc_aggregate([nDCG @ 10, R @ 100], loaded.qrels, run)
    return float(found[nDCG @ 10]), float(found[R @ 100])


def evaluate_engine(
    name: EngineName, loaded: Loaded, pieces: list[tuple[str, Any, str]], vectors: np.ndarray,
    queries: dict[str, np.ndarray], progress: Progress, label: str, text_vectors: dict[str, np.ndarray],
) -> EngineResult:  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="beir-") as tmp:
        index = open_engine(name, Path(tmp))
        try:
            by_document: dict[str, list[IndexedChunk]] = {}
            for (doc_id, chunk, _), vector in zip(pieces, vectors, strict=True):
                by_document.setdefault(doc_id, []).append(
                    IndexedChunk(f"{doc_id}#{chunk.seq}", doc_id, chunk.seq, chunk.text, chunk.start, chunk.end,
                                 chunk.heading, vector)
                )  # fmt: skip
            task = progress.add_task(f"{label} {name}: indexing", total=len(by_document))
            started = time.perf_counter()
            for doc_id, chunks in by_document.items():
                index.replace_file(TENANT, STORE, doc_id, chunks)
                progress.advance(task)
            index_s = time.perf_counter() - started
            started = time.perf_counter()
            index.maintain(TENANT, STORE, purge_now=True)
            maintain_s = time.perf_counter() - started
            stores = IndexStores(index, TENANT)
            settings = RetrievalSettings.model_construct(**{**RetrievalSettings().model_dump(), "candidates": 200})
            scorer = InProcessPoolScorer(stores, text_vectors)
            pooled = settings.model_copy(update={"rerank_model": RERANK_POOL})
            hybrids = {
                "built-in": HybridSearch(stores, settings),  # type: ignore[arg-type]
                "pool": HybridSearch(stores, pooled, scorer),  # type: ignore[arg-type]
            }
            modes = []
            for mode in MODES:
                task = progress.add_task(f"{label} {name}: {mode}", total=len(loaded.queries))
                runs: dict[str, list[str]] = {}
                seconds = []
                for query_id, text in loaded.queries.items():
                    stores.question = queries[query_id]
                    started = time.perf_counter()
                    runs[query_id] = asyncio.run(_rank(index, hybrids, stores, scorer, mode, text))
                    seconds.append(time.perf_counter() - started)
                    progress.advance(task)
                ndcg, recall = _measured(loaded, runs)
                modes.append(ModeResult(mode=mode, ndcg_at_10=round(ndcg, 4), recall_at_100=round(recall, 4),
                                        p50_ms=round(1000 * float(np.median(seconds)), 2)))  # fmt: skip
        finally:
            index.close()
    return EngineResult(engine=name, index_s=round(index_s, 2), maintain_s=round(maintain_s, 2), modes=modes)


def evaluate_set(
    name: str, engines: list[EngineName], progress: Progress, *, cache: Path = DEFAULT_CACHE,
    limit_documents: int | None = None,
) -> SetResult:  # fmt: skip
    loaded = load(name, limit_documents=limit_documents)
    pieces = chunked(loaded.documents)
    vectors, embed_s = embedded([text for _, _, text in pieces], cache, progress, f"{name} corpus")
    query_ids = list(loaded.queries)
    query_vectors, query_s = embedded([loaded.queries[q] for q in query_ids], cache, progress, f"{name} queries")
    queries = dict(zip(query_ids, query_vectors, strict=True))
    # What the re-rank pool's worker embeds: a chunk's text as the index returns it (no title heading in front).
    plain = sorted({chunk.text for _, chunk, _ in pieces})
    plain_vectors, plain_s = embedded(plain, cache, progress, f"{name} chunk texts")
    text_vectors = dict(zip(plain, plain_vectors, strict=True))
    published = SETS[name]
    return SetResult(
        set=name,
        documents=len(loaded.documents),
        chunks=len(pieces),
        queries=len(loaded.queries),
        embed_s=round(embed_s + query_s + plain_s, 1),
        published_bm25=published.bm25.ndcg_at_10,
        published_minilm=published.minilm.ndcg_at_10,
        published_bm25_cross_encoder=published.bm25_cross_encoder.ndcg_at_10,
        engines=[evaluate_engine(e, loaded, pieces, vectors, queries, progress, name, text_vectors) for e in engines],
    )


def report_lines(results: list[SetResult]) -> list[str]:
    """The markdown report: one table per set, published figures beside."""
    lines = ["# Retrieval on BEIR (test splits)", ""]
    for r in results:
        lines += [
            f"## {r.set}: {r.documents} documents ({r.chunks} chunks), {r.queries} queries",
            "",
            f"Published nDCG@10: BM25 {r.published_bm25:.3f} (BEIR), all-MiniLM-L6-v2 {r.published_minilm:.3f} (MTEB), "
            f"BM25 top 100 re-ranked by the MiniLM-L6 cross-encoder {r.published_bm25_cross_encoder:.3f} (BEIR).",
            "",
            "| engine | mode | nDCG@10 | recall@100 | p50 ms/query |",
            "|---|---|---:|---:|---:|",
        ]
        for e in r.engines:
            lines += [
                f"| {e.engine} | {m.mode} | {m.ndcg_at_10:.4f} | {m.recall_at_100:.4f} | {m.p50_ms:.1f} |"
                for m in e.modes
            ]
        lines += [""] + [
            f"- {e.engine}: indexed in {e.index_s:.1f} s, maintenance pass {e.maintain_s:.1f} s" for e in r.engines
        ]
        lines.append("")
    return lines


def plot(results: list[SetResult], path: Path) -> None:
    """nDCG@10 per set and mode (the service's engine), the published BM25 and MiniLM figures as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6.5 * len(results), 4.5), squeeze=False)
    for ax, r in zip(axes[0], results, strict=True):
        engine = r.engines[0]
        ax.bar([m.mode for m in engine.modes], [m.ndcg_at_10 for m in engine.modes], color="#4c72b0")
        ax.axhline(r.published_bm25, color="#dd8452", linestyle="--", label=f"BM25, BEIR ({r.published_bm25:.3f})")
        ax.axhline(r.published_minilm, color="#55a868", linestyle=":", label=f"MiniLM, MTEB ({r.published_minilm:.3f})")
        ce = r.published_bm25_cross_encoder
        ax.axhline(ce, color="#c44e52", linestyle="-.", label=f"BM25+cross-encoder, BEIR ({ce:.3f})")
        ax.set_title(f"{r.set} ({engine.engine})")
        ax.set_ylabel("nDCG@10")
        ax.tick_params(axis="x", rotation=20)
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(sets: list[str], engines: list[EngineName], out_dir: Path, *, cache: Path = DEFAULT_CACHE) -> list[SetResult]:
    out_dir.mkdir(parents=True, exist_ok=True)
    with Progress() as progress:
        results = [evaluate_set(name, engines, progress, cache=cache) for name in sets]
    (out_dir / "beir.json").write_text(
        "[\n" + ",\n".join(r.model_dump_json(indent=2) for r in results) + "\n]\n", encoding="utf-8"
    )
    (out_dir / "beir.md").write_text("\n".join(report_lines(results)), encoding="utf-8")
    plot(results, out_dir / "beir.png")
    return results

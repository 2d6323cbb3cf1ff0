"""The vector stores' engine at scale, in process: N chunks of real public text in one LanceDB store (as the service
keeps it), then the write rate, the maintenance pass that builds the approximate index, search p50 / p95 (vector,
BM25, chat's hybrid step), the approximate index's recall@10 against an exact search, and the process's resident
memory while it searches.

    python -m functions.offline.bench.retrieval_scale --corpus wiki.jsonl --corpus gutenberg.jsonl \
        --chunks 1000000 --work-dir /tmp/scale --out-dir bench-results/scale

The corpus: JSONL passages (`{"text": ...}`, about 700 characters each) of English Wikipedia (CC BY-SA 3.0;
github.com/chinapedia/wikipedia.abstract.en) and Project Gutenberg books (public domain in the USA;
github.com/rcdm-uga/Gutenberg_Text), made by `functions/offline/bench/scale_corpus.py` from clones of the two.

The vectors are MiniLM's own input word embeddings (all-MiniLM-L6-v2's `word_embeddings`, 384 dimensions) averaged
over each passage's tokens, not its sentence embedding: a transformer pass per chunk would take about nine hours for a
million chunks on this machine's two cores. Search latency and memory depend on the number of vectors and their
dimensions, which match what the service stores; the vectors are cached next to the work dir, so a second run embeds
nothing. Retrieval quality is measured elsewhere (docs/retrieval-engines.md, BEIR with MiniLM itself)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from pydantic import BaseModel
from rich.progress import Progress

from functions.offline.evals.beir.in_process import IndexStores
from functions.retrieval.hybrid import HybridSearch
from shared.settings import RetrievalSettings
from shared.storage.lance_vector_index import LanceVectorIndex
from shared.storage.vector_index import IndexedChunk

TENANT, STORE = "scale", "vs_scale"
PER_FILE = 1000  # chunks per indexed file (one write each)
QUERIES = 100


class Latency(BaseModel):
    what: str
    p50_ms: float
    p95_ms: float


class ScaleReport(BaseModel):
    chunks: int
    dimensions: int
    embed_s: float  # 0 when cached
    write_s: float | None  # None: a resumed run found every chunk written already
    chunks_per_s: float | None
    maintain_s: float  # compaction, BM25 index, the approximate vector index build (or its update, resumed)
    vector_index: str
    recall_at_10: float  # of the approximate search, against exact search of the same vectors
    latencies: list[Latency]
    rss_mb: float  # resident memory of the process that searched (a fresh one, as a gateway opens the store)
    disk_mb: float
    gateway: Latency | None = None  # the search endpoint through a real gateway (`--gateway`)
    gateway_rss_mb: float | None = None


def passages(paths: list[Path], limit: int) -> list[str]:
    texts: list[str] = []
    for path in paths:
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                texts.append(json.loads(line)["text"])
                if len(texts) == limit:
                    return texts
    return texts


class StaticMiniLM:
    """all-MiniLM-L6-v2's input word embeddings averaged over a text's tokens (see the module docstring)."""

    def __init__(self) -> None:
        from safetensors import safe_open

        from functions.files.vector_stores import DEFAULT_EMBEDDING_MODEL
        from shared.fleet.embedding_pools import packaged_tokenizer
        from shared.fleet.tables import tables

        directory = tables().embedding_pools[DEFAULT_EMBEDDING_MODEL].local.directory()  # type: ignore[union-attr]
        self.tokenizer = packaged_tokenizer(directory)
        with safe_open(str(directory / "model.safetensors"), "np") as weights:
            self.table = weights.get_tensor("embeddings.word_embeddings.weight").astype(np.float32)

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self.table.shape[1]), np.float32)
        for i, encoding in enumerate(self.tokenizer.encode_batch(texts)):
            out[i] = self.table[np.asarray(encoding.ids[1:-1] or encoding.ids)].mean(axis=0)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-6)


def vectors_for(texts: list[str], cache: Path, progress: Progress) -> tuple[np.ndarray, float]:
    if cache.exists():
        return np.load(cache, mmap_mode="r"), 0.0
    encoder = StaticMiniLM()
    task = progress.add_task(f"embedding {len(texts)} passages (static MiniLM)", total=len(texts))
    started, parts = time.perf_counter(), []
    for first in range(0, len(texts), 4096):
        parts.append(encoder.encode(texts[first : first + 4096]).astype(np.float16))
        progress.advance(task, len(parts[-1]))
    vectors = np.concatenate(parts)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, vectors)
    return vectors, time.perf_counter() - started


def _files(texts: list[str], vectors: np.ndarray) -> Iterator[tuple[str, list[IndexedChunk]]]:
    for first in range(0, len(texts), PER_FILE):
        file_id = f"file-{first // PER_FILE:06d}"
        yield file_id, [
            IndexedChunk(f"{file_id}#{i}", file_id, i, texts[first + i], 0, len(texts[first + i]), None,
                         np.asarray(vectors[first + i], np.float32))
            for i in range(min(PER_FILE, len(texts) - first))
        ]  # fmt: skip


def _latency(what: str, seconds: list[float]) -> Latency:
    ms = np.asarray(seconds) * 1000
    return Latency(what=what, p50_ms=round(float(np.median(ms)), 2), p95_ms=round(float(np.percentile(ms, 95)), 2))


def _rss_mb() -> float:
    import psutil

    return round(psutil.Process(os.getpid()).memory_info().rss / 2**20, 1)


def _searched_in_a_fresh_process(
    work_dir: Path, query_vectors: np.ndarray, questions: list[str], vector_index: str
) -> tuple[float, list[Latency], float]:
    """(recall@10, latencies, resident MB) measured in a new process that opens the store as a gateway does: its
    memory is the engine's and its caches', not this process's corpus."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_search_phase, (str(work_dir), query_vectors, questions, vector_index))


def _search_phase(
    work_dir: str, query_vectors: np.ndarray, questions: list[str], vector_index: str
) -> tuple[float, list[Latency], float]:
    index = LanceVectorIndex(str(Path(work_dir) / "vectors"))
    table = index._open(TENANT, STORE)
    exact_hits = [
        {r["chunk_id"] for r in table.search(q, vector_column_name="vector").distance_type("cosine")
         .bypass_vector_index().select(["chunk_id", "_distance"]).limit(10).to_list()}
        for q in query_vectors[:20]
    ]  # fmt: skip
    found = [{h.chunk_id for h in index.search(TENANT, STORE, q, 10)} for q in query_vectors[:20]]
    recall = float(np.mean([len(a & b) / 10 for a, b in zip(exact_hits, found, strict=True)]))
    stores = IndexStores(index, TENANT)
    hybrid = HybridSearch(stores, RetrievalSettings.model_construct(**RetrievalSettings().model_dump()))  # type: ignore[arg-type]
    caller, ref = SimpleNamespace(tenant=SimpleNamespace(id=TENANT)), SimpleNamespace(id=STORE, revision="0")
    timings: dict[str, list[float]] = {"vector": [], "keyword": [], "hybrid": []}
    for question, vector in zip(questions, query_vectors, strict=True):
        started = time.perf_counter()
        index.search(TENANT, STORE, vector, 20)
        timings["vector"].append(time.perf_counter() - started)
        started = time.perf_counter()
        index.keyword_search(TENANT, STORE, question, 20)
        timings["keyword"].append(time.perf_counter() - started)
        stores.question = vector
        started = time.perf_counter()
        asyncio.run(hybrid.search(caller, [ref], question, 6))  # type: ignore[arg-type]
        timings["hybrid"].append(time.perf_counter() - started)
    latencies = [
        _latency(f"vector search, top 20 ({vector_index} index)", timings["vector"][1:]),  # the first loads it
        _latency("BM25, top 20", timings["keyword"][1:]),
        _latency("chat's hybrid step (both, RRF, re-rank, MMR; no embedding)", timings["hybrid"][1:]),
    ]
    index.close()
    return recall, latencies, _rss_mb()


def run(corpus: list[Path], chunks: int, work_dir: Path, progress: Progress, *, gateway: bool = False) -> ScaleReport:
    texts = passages(corpus, chunks + QUERIES)
    queries, texts = texts[-QUERIES:], texts[:-QUERIES]  # questions from passages that are not in the store
    vectors, embed_s = vectors_for(texts + queries, work_dir / f"vectors-{len(texts)}.npy", progress)
    query_vectors = np.asarray(vectors[len(texts) :], np.float32)
    questions = [" ".join(q.split()[:12]) for q in queries]  # the passage's opening words, as a question's length
    index = LanceVectorIndex(str(work_dir / "vectors"), compact_every=10_000)
    written = index.count(TENANT, STORE)
    task = progress.add_task(f"writing {len(texts)} chunks", total=len(texts), completed=written)
    started = time.perf_counter()
    for file_id, file_chunks in _files(texts, vectors) if written < len(texts) else ():
        if written and index.count(TENANT, STORE, file_id) == len(file_chunks):
            continue  # a resumed run: this file is in already
        index.replace_file(TENANT, STORE, file_id, file_chunks)
        progress.advance(task, len(file_chunks))
    write_s = None if written == len(texts) else time.perf_counter() - started
    started = time.perf_counter()
    maintained = index.maintain(TENANT, STORE)
    maintain_s = time.perf_counter() - started
    index.close()
    recall, latencies, rss_mb = _searched_in_a_fresh_process(
        work_dir, query_vectors, questions, maintained.vector_index
    )
    disk = sum(p.stat().st_size for p in (work_dir / "vectors").rglob("*") if p.is_file()) / 2**20
    through, gateway_rss = None, None
    if gateway:
        from functions.offline.bench.retrieval_scale_gateway import gateway_phase

        files = -(-len(texts) // PER_FILE)
        p50, p95, gateway_rss = gateway_phase(work_dir, TENANT, STORE, questions[:50], files, PER_FILE)
        what = "through the gateway: POST /v1/vector_stores/{id}/search (auth, MiniLM embedding, hybrid ranking)"
        through = Latency(what=what, p50_ms=p50, p95_ms=p95)
    return ScaleReport(
        chunks=len(texts), dimensions=int(vectors.shape[1]), embed_s=round(embed_s, 1),
        write_s=None if write_s is None else round(write_s, 1),
        chunks_per_s=None if write_s is None else round(len(texts) / max(write_s, 1e-9), 1),
        maintain_s=round(maintain_s, 1),
        vector_index=maintained.vector_index, recall_at_10=round(recall, 3), latencies=latencies,
        rss_mb=rss_mb, disk_mb=round(disk, 1), gateway=through, gateway_rss_mb=gateway_rss,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, action="append", required=True)
    parser.add_argument("--chunks", type=int, default=1_000_000)
    parser.add_argument("--work-dir", type=Path, default=Path("bench-results/scale-work"))
    parser.add_argument("--out-dir", type=Path, default=Path("bench-results/scale"))
    parser.add_argument("--gateway", action="store_true", help="also search through a real gateway over HTTP")
    args = parser.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with Progress() as progress:
        report = run(args.corpus, args.chunks, args.work_dir, progress, gateway=args.gateway)
    (args.out_dir / "scale.json").write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    print(report.model_dump_json(indent=2))


if __name__ == "__main__":
    main()

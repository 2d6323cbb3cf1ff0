"""Benchmark phase: retrieval. Through the gateway: ingestion throughput in PDF pages per second (upload, text
extraction, chunking, embedding, indexing, until every file is `completed`), the search endpoint's latency and chat's
retrieval step (as its `retrieval.elapsed_ms` reports it). In process: search latency on a store of 10,000 chunks
(the embedded SQLite index; vector search, BM25 and the whole hybrid step with fusion and re-rank), which the CPU
stack could not ingest through the embedding worker within a benchmark run.

The ingested documents are public text: the retrieval eval's five Wikipedia articles (SQuAD's, CC BY-SA 4.0;
functions/offline/evals/rag/data/sources.json), each typeset as a multi-page PDF by fpdf2 (Letter, Helvetica 11 pt, its
own line wrapping and page breaks); the gateway latencies ask SQuAD's questions about them. The 10,000-chunk store is
synthetic but word-like (a Zipf-distributed vocabulary of pronounceable words), so BM25 sees realistic term
statistics; its vectors are random unit vectors (search cost does not depend on their values)."""

from __future__ import annotations

import asyncio
import tempfile
import time
import unicodedata
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
from rich.progress import Progress

from functions.offline.bench.phases.embeddings_phase import bench_key
from functions.offline.bench.results.retrieval_results import IngestionStats, LatencyStats, RetrievalStats
from functions.offline.evals.beir.in_process import IndexStores
from functions.offline.evals.rag.items import Document, load_documents, load_questions, sample
from functions.offline.measure import stats
from functions.retrieval.hybrid import HybridSearch
from shared.settings import RetrievalSettings

SOURCE = "SQuAD's Wikipedia articles (CC BY-SA 4.0), typeset by fpdf2"
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "gu", "re", "shi", "bo", "an", "el")
DIMENSIONS = 384


def vocabulary(size: int = 4000) -> list[str]:
    words = []
    for i in range(size):
        word, n = "", i + 7
        while n:
            word += SYLLABLES[n % len(SYLLABLES)]
            n //= len(SYLLABLES)
        words.append(word)
    return words


class TextMaker:
    """Deterministic prose-like lines: Zipf-distributed words (a few very common, a long tail of rare ones)."""

    def __init__(self, seed: int = 7) -> None:
        self.words = vocabulary()
        self.rng = np.random.default_rng(seed)

    def line(self, chars: int = 75) -> str:
        out = ""
        while len(out) < chars:
            out += self.words[min(int(self.rng.zipf(1.3)) - 1, len(self.words) - 1)] + " "
        return out.strip().capitalize() + "."

    def question(self) -> str:
        return " ".join(self.words[int(i)] for i in self.rng.integers(20, 2000, size=5))


def typeset(document: Document) -> tuple[bytes, int]:
    """(the PDF, its pages): the document's title as a heading, then its paragraphs, wrapped and paginated by fpdf2.
    Helvetica is a core PDF font (latin-1): other characters (a few per article) print as `?`."""
    from fpdf import FPDF

    pdf = FPDF(format="letter")
    pdf.set_margins(20, 20)
    pdf.set_auto_page_break(True, margin=20)
    pdf.add_page()
    title, *paragraphs = [p for p in document.text.split("\n\n") if p.strip()]
    pdf.set_font("Helvetica", "B", 16)
    pdf.multi_cell(0, 9, _latin1(title), new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", size=11)
    for paragraph in paragraphs:
        pdf.ln(3)
        pdf.multi_cell(0, 5.5, _latin1(paragraph), new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output()), pdf.page_no()


def _latin1(text: str) -> str:
    return unicodedata.normalize("NFKC", text).encode("latin-1", "replace").decode("latin-1")


def _latency(label: str, seconds: list[float]) -> LatencyStats:
    return LatencyStats(
        label=label,
        runs=len(seconds),
        p50_ms=stats.to_ms(stats.percentile(seconds, 50)),
        p95_ms=stats.to_ms(stats.percentile(seconds, 95)),
    )


async def _ingest(
    client: httpx.AsyncClient, documents: list[Document], progress: Progress
) -> tuple[str, IngestionStats]:
    typeset_ = [typeset(d) for d in documents]
    pages = sum(n for _, n in typeset_)
    task = progress.add_task("retrieval: ingestion (pages)", total=pages)
    started = time.perf_counter()
    ids = []
    for document, (body, _) in zip(documents, typeset_, strict=True):
        upload = await client.post(
            "/v1/files",
            files={"file": (document.filename.replace(".txt", ".pdf"), body, "application/pdf")},
            data={"purpose": "assistants"},
        )
        upload.raise_for_status()
        ids.append(upload.json()["id"])
    store = await client.post("/v1/vector_stores", json={"name": "bench-retrieval", "file_ids": ids})
    store.raise_for_status()
    store_id = store.json()["id"]
    while True:
        counts = (await client.get(f"/v1/vector_stores/{store_id}")).json()["file_counts"]
        progress.update(task, completed=round(pages * (counts["completed"] + counts["failed"]) / len(ids)))
        if counts["completed"] + counts["failed"] + counts["cancelled"] >= len(ids):
            break
        await asyncio.sleep(0.25)
    wall = time.perf_counter() - started
    ingestion = IngestionStats(
        files=len(ids), pages=pages, chars=sum(len(d.text) for d in documents), wall_s=round(wall, 2),
        pages_per_s=round(pages / wall, 3), failed=counts["failed"], source=SOURCE,
    )  # fmt: skip
    return store_id, ingestion


async def _gateway_latencies(
    client: httpx.AsyncClient, store_id: str, questions: list[str], model: str
) -> list[LatencyStats]:
    searches, steps = [], []
    for question in questions:
        started = time.perf_counter()
        found = await client.post(f"/v1/vector_stores/{store_id}/search", json={"query": question})
        if found.status_code == 200:
            searches.append(time.perf_counter() - started)
    for question in questions:
        body = {
            "model": model, "messages": [{"role": "user", "content": question}], "max_tokens": 1,
            "vector_store_ids": [store_id],
        }  # fmt: skip
        answered = await client.post("/v1/chat/completions", json=body)
        report = answered.json().get("retrieval") if answered.status_code == 200 else None
        if report and report["status"] == "used":
            steps.append(report["elapsed_ms"] / 1000)
    return [
        _latency("gateway: POST /v1/vector_stores/{id}/search (embedding + hybrid ranking)", searches),
        _latency("gateway: chat's retrieval step (embedding, vector + BM25, fusion, re-rank)", steps),
    ]


def engine_latencies(chunks: int, runs: int, progress: Progress) -> tuple[float, list[LatencyStats]]:
    """(maintenance seconds, latencies) on a fresh in-process index (LanceDB in a temporary directory) of `chunks`
    chunks."""
    from shared.storage.lance_vector_index import LanceVectorIndex
    from shared.storage.vector_index import IndexedChunk

    maker, rng = TextMaker(seed=3), np.random.default_rng(5)
    task = progress.add_task(f"retrieval: {chunks} chunks in process", total=chunks + 3 * runs)
    with tempfile.TemporaryDirectory() as tmp:
        index = LanceVectorIndex(str(Path(tmp) / "vectors"))
        try:
            per_file = 1000
            for f in range(0, chunks, per_file):
                batch = []
                for seq in range(min(per_file, chunks - f)):
                    text = " ".join(maker.line() for _ in range(10))  # ~750 characters, ~190 tokens
                    vector = rng.standard_normal(DIMENSIONS).astype(np.float32)
                    batch.append(
                        IndexedChunk(f"file-{f}-{seq:05d}", f"file-{f}", seq, text, 0, len(text), None, vector)
                    )
                index.replace_file("bench", "vs_bench", f"file-{f}", batch)
                progress.advance(task, len(batch))
            started = time.perf_counter()
            index.maintain("bench", "vs_bench")  # what the scheduled job does after ingestion: compaction, BM25 index
            build_s = time.perf_counter() - started
            questions = [(maker.question(), rng.standard_normal(DIMENSIONS).astype(np.float32)) for _ in range(runs)]
            index.search("bench", "vs_bench", questions[0][1], 20)  # opens the table once, as a warm gateway
            vector_s, keyword_s, hybrid_s = [], [], []
            stores = IndexStores(index, "bench", filename="bench.pdf")
            hybrid = HybridSearch(stores, RetrievalSettings.model_construct())  # the defaults
            ref = SimpleNamespace(id="vs_bench", revision=index.revision("bench", "vs_bench"))
            for text, vector in questions:
                started = time.perf_counter()
                index.search("bench", "vs_bench", vector, 20)
                vector_s.append(time.perf_counter() - started)
                started = time.perf_counter()
                index.keyword_search("bench", "vs_bench", text, 20)
                keyword_s.append(time.perf_counter() - started)
                progress.advance(task, 2)
            caller = SimpleNamespace(tenant=SimpleNamespace(id="bench"))
            for text, vector in questions:
                stores.question = vector
                started = time.perf_counter()
                asyncio.run(hybrid.search(caller, [ref], text, 6))  # type: ignore[arg-type]
                hybrid_s.append(time.perf_counter() - started)
                progress.advance(task)
        finally:
            index.close()
    return build_s, [
        _latency(f"in process, {chunks} chunks: vector search (LanceDB, exact cosine, top 20)", vector_s),
        _latency(f"in process, {chunks} chunks: BM25 (LanceDB full-text index, top 20)", keyword_s),
        _latency(f"in process, {chunks} chunks: hybrid step (both, RRF, re-rank + MMR; no embedding)", hybrid_s),
    ]


async def retrieval_phase(
    base_url: str,
    progress: Progress,
    *,
    keys_path: Path,
    admin_key: str | None,
    api_key: str | None,
    model: str = "mini",
    quick: bool = False,
    chunks: int = 10_000,
) -> RetrievalStats:
    api_key = await asyncio.to_thread(bench_key, base_url, keys_path, admin_key, api_key)
    documents = load_documents()[: 2 if quick else None]
    runs = 10 if quick else 30
    named = {d.id for d in documents}
    questions = [q.question for q in sample(load_questions(), None) if q.document_id in named][:runs]
    headers = {"authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=600.0) as client:
        store_id, ingestion = await _ingest(client, documents, progress)
        gateway = await _gateway_latencies(client, store_id, questions, model)
        await client.delete(f"/v1/vector_stores/{store_id}")
    build_s, engine = await asyncio.to_thread(engine_latencies, chunks, runs, progress)
    return RetrievalStats(
        ingestion=ingestion,
        gateway=gateway,
        chunks=chunks,
        maintenance_s=round(build_s, 3),
        engine=engine,
        note=(
            "Ingestion and the gateway rows: through the running stack (embedding worker on CPU, LanceDB index). "
            "In-process rows: the same index and retrieval code on a 10k-chunk store, question embedding excluded "
            "(see the embeddings phase for its cost)."
        ),
    )


def main() -> None:
    """`python -m functions.offline.bench.phases.retrieval_phase --base-url URL --admin-key-file F`: the phase alone,
    against a running stack; prints its section of bench.md and writes OUT/retrieval.json."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--admin-key-file", type=Path, help="the stack's admin key (creates the bench tenant)")
    parser.add_argument("--api-key", help="a key to use instead of a bench tenant's")
    parser.add_argument("--out-dir", type=Path, default=Path("bench-results"))
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    from functions.offline.bench.phases.goodput_phase import KEYS_FILE
    from functions.offline.bench.results.retrieval_results import retrieval_lines

    admin = args.admin_key_file.read_text().strip() if args.admin_key_file else None
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with Progress() as progress:
        found = asyncio.run(
            retrieval_phase(
                args.base_url, progress, keys_path=args.out_dir / KEYS_FILE, admin_key=admin, api_key=args.api_key,
                quick=args.quick,
            )
        )  # fmt: skip
    (args.out_dir / "retrieval.json").write_text(found.model_dump_json(indent=2) + "\n")
    print("\n".join(retrieval_lines(found)))


if __name__ == "__main__":
    main()

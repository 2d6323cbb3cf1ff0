"""The approximate vector index against exact search on a BEIR set's real MiniLM vectors: latency and recall@10, the
measurement behind `FLEETCHAT_VECTORS_ANN_MIN_ROWS` (docs/retrieval-engines.md).

    python -m functions.offline.evals.beir.ann_threshold --set scifact
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.progress import Progress

from functions.offline.evals.beir.data_sets import load
from functions.offline.evals.beir.retrieval_eval import DEFAULT_CACHE, chunked, embedded
from shared.storage.lance_vector_index import LanceVectorIndex
from shared.storage.vector_index import IndexedChunk

DOCUMENTS_PER_WRITE = 500
K = 10


def compare(name: str) -> dict[str, float]:
    """p50 / p95 ms of both searches over the set's chunks, and the index's recall@10 against exact search."""
    loaded = load(name)
    pieces = chunked(loaded.documents)
    with Progress() as progress:
        vectors, _ = embedded([text for _, _, text in pieces], DEFAULT_CACHE, progress, f"{name} corpus")
        ids = list(loaded.queries)
        questions, _ = embedded([loaded.queries[q] for q in ids], DEFAULT_CACHE, progress, f"{name} queries")
    found: dict[str, list[list[str]]] = {}
    out: dict[str, float] = {"chunks": float(len(pieces))}
    with tempfile.TemporaryDirectory(prefix="ann-") as tmp:
        for label, threshold in (("exact", 10**12), ("ann", 256)):
            index = LanceVectorIndex(str(Path(tmp) / label), ann_min_rows=threshold)
            for first in range(0, len(pieces), DOCUMENTS_PER_WRITE):
                file_id = f"part-{first}"
                chunks = [
                    IndexedChunk(f"{doc}#{c.seq}", file_id, n, c.text, c.start, c.end, c.heading, vector)
                    for n, ((doc, c, _), vector) in enumerate(
                        zip(pieces[first : first + DOCUMENTS_PER_WRITE], vectors[first : first + DOCUMENTS_PER_WRITE],
                            strict=True)
                    )
                ]  # fmt: skip
                index.replace_file("eval", "vs_ann", file_id, chunks)
            index.maintain("eval", "vs_ann", purge_now=True)
            seconds, found[label] = [], []
            for question in questions:
                started = time.perf_counter()
                hits = index.search("eval", "vs_ann", question, K)
                seconds.append(time.perf_counter() - started)
                found[label].append([hit.chunk_id for hit in hits])
            index.close()
            out[f"{label}_p50_ms"] = round(1000 * float(np.median(seconds)), 2)
            out[f"{label}_p95_ms"] = round(1000 * float(np.percentile(seconds, 95)), 2)
    recall = [len(set(a) & set(e)) / K for a, e in zip(found["ann"], found["exact"], strict=True)]
    out["recall_at_10"] = round(float(np.mean(recall)), 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="scifact")
    print(compare(parser.parse_args().set))


if __name__ == "__main__":
    main()

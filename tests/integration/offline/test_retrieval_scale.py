"""The scale bench, shrunk: real public passages (SciFact's abstracts, shipped with the BEIR eval) written into a
LanceDB store in files of many chunks, maintained, searched three ways, reported; and the corpus builder on a git
repository made here."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from rich.progress import Progress

from functions.offline.bench.retrieval_scale import QUERIES, run
from functions.offline.bench.scale_corpus import files, passages
from functions.offline.evals.beir.data_sets import load


def test_a_small_run_writes_maintains_searches_and_reports(tmp_path: Path) -> None:
    corpus = tmp_path / "scifact.jsonl"
    with corpus.open("w") as out:
        for document in load("scifact").documents[:600]:
            out.write(json.dumps({"text": document.text}) + "\n")
    with Progress(disable=True) as progress:
        report = run([corpus], 400, tmp_path / "work", progress)
        # Vectors cached, every file written already; then searched through a real gateway too.
        again = run([corpus], 400, tmp_path / "work", progress, gateway=True)
    assert report.chunks == 400 and report.dimensions == 384 and (report.chunks_per_s or 0) > 0
    assert report.vector_index == "none" and report.recall_at_10 == 1.0  # exact search below the ANN threshold
    assert [lat.what.split(",")[0] for lat in report.latencies] == ["vector search", "BM25", "chat's hybrid step (both"]
    assert all(lat.p50_ms > 0 for lat in report.latencies) and report.rss_mb > 0 and report.disk_mb > 0
    assert again.embed_s == 0.0 and again.write_s is None and again.chunks == report.chunks
    assert again.gateway is not None and again.gateway.p50_ms > 0 and (again.gateway_rss_mb or 0) > 0
    assert report.gateway is None
    assert QUERIES == 100


def test_the_corpus_builder_keeps_prose_and_drops_boilerplate(tmp_path: Path) -> None:
    prose = " ".join(f"Sentence number {n} of a long paragraph tells a plain story." for n in range(40))
    book = (
        f"Licence header\n*** START OF THE BOOK ***\n\n{prose}\n\n- a list line\n\n{prose}\n"
        "*** END OF THE BOOK ***\nfooter"
    )
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "book.txt").write_text(book)
    (repo / "notes.md").write_text("not a book")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], check=True
    )
    [(name, data)] = list(files(repo, re.compile(r"\.txt$")))
    texts = list(passages(data.decode(), "gutenberg"))
    assert name == "book.txt" and texts and all(200 <= len(t) <= 2000 for t in texts)
    assert not any("Licence header" in t or "a list line" in t or "footer" in t for t in texts)

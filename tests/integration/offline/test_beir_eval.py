"""The BEIR retrieval eval, shrunk: SciFact's first 120 documents (every judged one among them kept) ingested as the
product ingests them into the service's engine, each mode ranked and scored by ir-measures, the report and plot made.
The real run (`fleetchat eval beir`) is in docs/retrieval-engines.md."""

from __future__ import annotations

from pathlib import Path

from rich.progress import Progress

from functions.offline.evals.beir.data_sets import SETS, load
from functions.offline.evals.beir.retrieval_eval import MODES, evaluate_set, plot, report_lines


def test_the_shipped_sets_load_with_their_judgements() -> None:
    scifact = load("scifact")
    assert len(scifact.documents) == 5183 and len(scifact.queries) == 300
    assert sum(len(j) for j in scifact.qrels.values()) == 339
    assert scifact.documents[0].id == "4983" and scifact.documents[0].title.startswith("Microstructural development")
    nfcorpus = load("nfcorpus")
    assert len(nfcorpus.documents) == 3633 and len(nfcorpus.queries) == 323
    assert set(SETS) == {"scifact", "nfcorpus"}


def test_a_small_run_ranks_every_mode_and_reports_it(tmp_path: Path) -> None:
    with Progress(disable=True) as progress:
        result = evaluate_set("scifact", ["lancedb"], progress, cache=tmp_path / "cache", limit_documents=120)
    assert result.documents == 120 and result.chunks > result.documents and result.queries > 0
    (engine,) = result.engines
    assert [m.mode for m in engine.modes] == list(MODES)
    by_mode = {m.mode: m for m in engine.modes}
    # On a corpus this small every judged document is found within 100, and each ranking puts some of them first.
    assert all(m.recall_at_100 > 0.9 and m.ndcg_at_10 > 0.5 for m in engine.modes)
    assert by_mode["hybrid"].ndcg_at_10 >= min(by_mode["keyword"].ndcg_at_10, by_mode["vector"].ndcg_at_10)
    assert any("| lancedb | hybrid |" in line for line in report_lines([result]))
    plot([result], tmp_path / "beir.png")
    assert (tmp_path / "beir.png").stat().st_size > 10_000
    assert list((tmp_path / "cache").glob("minilm-*.npy"))  # a second run embeds nothing

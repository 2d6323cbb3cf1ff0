"""The BEIR sets the retrieval eval reads (corpus, test queries, test relevance judgements, shipped gzipped in
data/), with the figures published for them: BM25 (BEIR's paper, Table 2; recall@100 from Anserini's rerun of the same
BM25), all-MiniLM-L6-v2 (MTEB's results repository) and BM25's top 100 re-ranked by the MiniLM-L6 cross-encoder
(BEIR's paper, Table 2, "BM25+CE"). Where each file came from, its checks and its licence:
data/PROVENANCE.md."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from pydantic import BaseModel

DATA = Path(__file__).parent / "data"


class Published(BaseModel):
    """nDCG@10 and recall@100 as published, with where they were read."""

    ndcg_at_10: float
    recall_at_100: float | None
    source: str


class BeirSet(BaseModel):
    name: str
    licence: str
    bm25: Published
    minilm: Published
    # BM25's top 100 re-ranked by a cross-encoder (cross-encoder/ms-marco-MiniLM-L-6-v2, the re-rank pool's deployed
    # model): what the local re-rank scorer is measured against on the same protocol.
    bm25_cross_encoder: Published


SETS: dict[str, BeirSet] = {
    "scifact": BeirSet(
        name="scifact",
        licence="claims CC BY 4.0, abstracts ODC-By 1.0 (allenai/scifact LICENSE.md since 2023-09-27)",
        bm25=Published(ndcg_at_10=0.665, recall_at_100=0.9076, source="BEIR Table 2; R@100: Anserini BEIR regressions"),
        minilm=Published(ndcg_at_10=0.64508, recall_at_100=0.925, source="embeddings-benchmark/results, SciFact"),
        bm25_cross_encoder=Published(ndcg_at_10=0.688, recall_at_100=None, source="BEIR Table 2, BM25+CE"),
    ),
    "nfcorpus": BeirSet(
        name="nfcorpus",
        licence="research use (Boteva et al., ECIR 2016); the creators' terms page was not readable here",
        bm25=Published(ndcg_at_10=0.325, recall_at_100=0.2500, source="BEIR Table 2; R@100: Anserini BEIR regressions"),
        minilm=Published(ndcg_at_10=0.31594, recall_at_100=0.31151, source="embeddings-benchmark/results, NFCorpus"),
        bm25_cross_encoder=Published(ndcg_at_10=0.350, recall_at_100=None, source="BEIR Table 2, BM25+CE"),
    ),
}


class Document(BaseModel):
    id: str
    title: str
    text: str

    def markdown(self) -> str:
        """The document as a user would upload it: its title a heading over its text (the chunker then embeds every
        chunk with the title in front, as ingestion does)."""
        return f"# {self.title}\n\n{self.text}" if self.title.strip() else self.text


class Loaded(BaseModel):
    documents: list[Document]
    queries: dict[str, str]  # query id -> text (the test split's)
    qrels: dict[str, dict[str, int]]  # query id -> document id -> relevance


def load(name: str, *, limit_documents: int | None = None) -> Loaded:
    """A set's test split. `limit_documents`: the first N documents, every judged one among them kept, and only the
    queries with a judged document left (a small, fast version for tests)."""
    folder = DATA / name
    with gzip.open(folder / "corpus.jsonl.gz", "rt", encoding="utf-8") as corpus:
        documents = [Document(id=r["_id"], title=r.get("title") or "", text=r["text"]) for r in map(json.loads, corpus)]
    queries = {
        r["_id"]: r["text"]
        for r in map(json.loads, (folder / "queries-test.jsonl").read_text(encoding="utf-8").splitlines())
    }
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels-test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        if line.strip():
            query, doc, score = line.split("\t")
            qrels.setdefault(query, {})[doc] = int(score)
    if limit_documents is not None:
        documents = documents[:limit_documents]
        kept = {d.id for d in documents}
        qrels = {q: {d: s for d, s in judged.items() if d in kept} for q, judged in qrels.items()}
        qrels = {q: judged for q, judged in qrels.items() if any(s > 0 for s in judged.values())}
    queries = {q: text for q, text in queries.items() if q in qrels}
    return Loaded(documents=documents, queries=queries, qrels=qrels)

"""Training and measuring the prompt-injection screen (functions/safety/injection_screen.py) on public data only.

Fitted on BIPIA's training split (functions/offline/injection_data: its contexts with its training attacks inserted at
the start, middle or end, as the benchmark composes them), with more ordinary text as negatives: SciFact's abstracts
(ODC-By 1.0; the retrieval eval's copy) and the modules of Python's standard library (PSF licence), since BIPIA's few
code and e-mail contexts alone teach that any imperative sentence is an attack. A window is a positive example when
most of it, or most of the attack, is the inserted attack; a negative when it holds none of it; the windows between
are left out. The threshold is chosen on the validation split (held-out contexts, held-out attack categories, a fifth
of the extra negatives) as the lowest whose benign flag rate, averaged over the kinds of text, is at most
`BENIGN_FLAG_TARGET`; then read once on sources never trained on: BIPIA's test split (its own contexts and attacks),
AgentDojo's tool outputs, InjecAgent's tool responses, and ordinary documents (NFCorpus, the RAG eval's SQuAD
articles) for benign passages flagged.

    python -m functions.offline.injection_data.train_screen   # trains, writes the model and its metrics
"""

from __future__ import annotations

import hashlib
import json
import random
import sysconfig
from collections import defaultdict
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from functions.offline.injection_data.load import load_rows
from functions.offline.injection_data.row import Row
from functions.safety.classifier.ngrams import WIDTH, document_frequency_idf
from functions.safety.classifier.token_table import MODEL_DIR, TokenTable
from functions.safety.injection_screen import (
    META_FILE,
    WEIGHTS_FILE,
    WINDOW_TOKENS,
    InjectionMeta,
    InjectionScreen,
    window_starts,
)

METRICS_FILE = "injection_metrics.json"
BENIGN_FLAG_TARGET = 0.02  # at most this share of validation's benign passages flagged
SEED = 2023


PASSAGE_CHARS = 1500  # ordinary text is cut into passages about a chunk's size


def _passages(text: str) -> list[str]:
    return [
        text[i : i + PASSAGE_CHARS] for i in range(0, len(text), PASSAGE_CHARS) if text[i : i + PASSAGE_CHARS].strip()
    ]


def ordinary_rows() -> list[Row]:
    """Benign passages from ordinary text: SciFact abstracts and standard-library modules, four fifths "train" and
    one fifth "validation" (by document), and held-out test documents (NFCorpus, a seeded 600; SQuAD's five
    articles)."""
    from functions.offline.evals.beir.data_sets import load

    rng = random.Random(SEED)
    rows: list[Row] = []

    def add(texts: list[str], source: str, kind: str, split: str | None = None) -> None:
        for n, text in enumerate(texts):
            chosen = split or ("validation" if rng.random() < 0.2 else "train")
            rows.extend(
                Row(text=p, label=0, source=source, split=chosen, kind=kind, group=f"{source}:{n}")  # type: ignore[arg-type]
                for p in _passages(text)
            )

    add([d.markdown() for d in load("scifact").documents], "scifact", "document")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    modules = sorted(p for p in stdlib.glob("*.py") if not p.name.startswith("_"))
    add([p.read_text(encoding="utf-8", errors="replace") for p in rng.sample(modules, min(120, len(modules)))],
        "stdlib", "code")  # fmt: skip
    nfcorpus = load("nfcorpus").documents
    add([d.markdown() for d in random.Random(SEED).sample(nfcorpus, 600)], "nfcorpus", "document", "test")
    rag = Path(__file__).parents[1] / "evals" / "rag" / "data" / "documents.jsonl"
    add(
        [json.loads(line)["text"] for line in rag.read_text(encoding="utf-8").splitlines()], "squad", "document", "test"
    )
    return rows


def attack_span(text: str, context: str) -> tuple[int, int] | None:
    """The characters of `text` that are not `context`'s: the inserted attack (None if `text` is not `context` with
    one insertion)."""
    prefix = 0
    while prefix < min(len(text), len(context)) and text[prefix] == context[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(text), len(context)) - prefix and text[-1 - suffix] == context[-1 - suffix]:
        suffix += 1
    if prefix + suffix != len(context):
        return None
    return prefix, len(text) - suffix


def window_labels(table: TokenTable, text: str, span: tuple[int, int] | None) -> np.ndarray:
    """Each window's label: 1 = mostly attack (or most of the attack), 0 = none of it, -1 = in between (left out)."""
    ids, offsets = table.encode(text)
    starts = window_starts(ids.size)
    if span is None:
        return np.zeros(len(starts), np.int64)
    inside = np.asarray([start < span[1] and end > span[0] for start, end in offsets], dtype=bool)
    total = int(inside.sum())
    labels = []
    for start in starts:
        covered = int(inside[start : start + WINDOW_TOKENS].sum())
        size = min(WINDOW_TOKENS, ids.size - start)
        if covered == 0:
            labels.append(0)
        elif covered >= 0.5 * size or (total and covered >= 0.5 * total):
            labels.append(1)
        else:
            labels.append(-1)
    return np.asarray(labels, np.int64)


def training_windows(
    screen: InjectionScreen, rows: list[Row]
) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """(dense, sparse, labels) of the labelled windows of `rows` (the screen's idf applied to the sparse rows)."""
    contexts = {r.group: r.text for r in rows if r.label == 0}
    dense, sparse, labels = [], [], []
    for row in rows:
        span = None if row.label == 0 else attack_span(row.text, contexts.get(row.group, ""))
        if row.label == 1 and span is None:
            continue  # no benign twin to find the attack by: left out
        d, s = screen.windows(row.text)
        y = window_labels(screen.table, row.text, span)
        keep = np.flatnonzero(y >= 0)
        dense.append(d[keep])
        sparse += [s[i] for i in keep]
        labels.append(y[keep])
    return np.concatenate(dense), sparse, np.concatenate(labels)


def as_matrix(dense: np.ndarray, sparse: list[tuple[np.ndarray, np.ndarray]]):  # -> scipy.sparse.csr_matrix
    from scipy.sparse import csr_matrix, hstack

    indptr = np.cumsum([0] + [len(i) for i, _ in sparse])
    indices = np.concatenate([i for i, _ in sparse]) if sparse else np.zeros(0, np.int64)
    values = np.concatenate([v for _, v in sparse]) if sparse else np.zeros(0, np.float32)
    grams = csr_matrix((values, indices, indptr), shape=(len(sparse), WIDTH))
    return hstack([csr_matrix(dense), grams]).tocsr()


class SourceMetrics(BaseModel):
    source: str
    attacks: int
    attacks_flagged: float  # share of attack passages flagged (attacks stopped)
    benign: int
    benign_flagged: float | None  # share of benign passages flagged (benign passages dropped); None: no benign rows


class ScreenMetrics(BaseModel):
    threshold: float
    validation: SourceMetrics
    test: list[SourceMetrics]
    trained_windows: int
    version: str


def measured(screen: InjectionScreen, rows: list[Row], threshold: float, label: str) -> SourceMetrics:
    by_label: dict[int, list[float]] = defaultdict(list)
    for row in rows:
        by_label[row.label].append(screen.score(row.text))
    attacks, benign = np.asarray(by_label[1]), np.asarray(by_label[0])
    return SourceMetrics(
        source=label,
        attacks=len(attacks),
        attacks_flagged=round(float((attacks >= threshold).mean()), 4) if len(attacks) else 0.0,
        benign=len(benign),
        benign_flagged=round(float((benign >= threshold).mean()), 4) if len(benign) else None,
    )


def chosen_threshold(screen: InjectionScreen, rows: list[Row]) -> float:
    """The lowest threshold whose benign flag rate, averaged over the kinds of text (e-mail, table, code, document),
    is at most BENIGN_FLAG_TARGET: a kind with few examples counts as much as one with many."""
    by_kind: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row.label == 0:
            by_kind[row.kind].append(screen.score(row.text))
    scores = {kind: np.asarray(values) for kind, values in by_kind.items()}
    for cut in np.unique(np.concatenate(list(scores.values()))):
        threshold = float(np.nextafter(cut, 1.0))
        if np.mean([(values >= threshold).mean() for values in scores.values()]) <= BENIGN_FLAG_TARGET:
            return threshold
    return 1.0


def train(out_dir: Path = MODEL_DIR) -> ScreenMetrics:
    from sklearn.linear_model import LogisticRegression

    table = TokenTable.load()
    ordinary = ordinary_rows()
    rows = load_rows("train", ["bipia"]) + [r for r in ordinary if r.split == "train"]
    # The n-grams' idf from the training windows, then the windows with it.
    unweighted = InjectionScreen(table, np.zeros(table.dim), np.zeros(WIDTH), 0.0, np.ones(WIDTH, np.float32), _meta())
    _, counted, _ = training_windows(unweighted, rows)
    idf = document_frequency_idf(counted, len(counted))
    screen = InjectionScreen(table, np.zeros(table.dim), np.zeros(WIDTH), 0.0, idf, _meta())
    dense, sparse, y = training_windows(screen, rows)
    model = LogisticRegression(C=4.0, class_weight="balanced", max_iter=3000, random_state=SEED)
    model.fit(as_matrix(dense, sparse), y)
    weights, bias = model.coef_[0].astype(np.float32), float(model.intercept_[0])
    version = hashlib.sha256(weights.tobytes() + np.float32(bias).tobytes()).hexdigest()[:12]
    screen = InjectionScreen(table, weights[: table.dim], weights[table.dim :], bias, idf, _meta(version))
    validation = load_rows("validation", ["bipia"]) + [r for r in ordinary if r.split == "validation"]
    threshold = chosen_threshold(screen, validation)
    screen.meta = screen.meta.model_copy(update={"threshold": threshold})
    by_source: dict[str, list[Row]] = defaultdict(list)
    for row in load_rows("test") + [r for r in ordinary if r.split == "test"]:
        by_source["documents" if row.source in ("nfcorpus", "squad") else row.source].append(row)
    metrics = ScreenMetrics(
        threshold=round(threshold, 6),
        validation=measured(screen, validation, threshold, "bipia+ordinary:validation"),
        test=[measured(screen, rows, threshold, f"{name}:test") for name, rows in sorted(by_source.items())],
        trained_windows=len(y),
        version=version,
    )
    np.savez_compressed(
        out_dir / WEIGHTS_FILE, dense=screen.dense, sparse=screen.sparse, bias=np.float32(bias), idf=idf
    )
    (out_dir / META_FILE).write_text(screen.meta.model_dump_json(indent=2) + "\n", encoding="utf-8")
    (out_dir / METRICS_FILE).write_text(metrics.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return metrics


def _meta(version: str = "untrained") -> InjectionMeta:
    return InjectionMeta(threshold=0.5, version=version, trained_on=["bipia:train", "scifact", "python-stdlib"])


if __name__ == "__main__":
    print(json.dumps(train().model_dump(), indent=2))

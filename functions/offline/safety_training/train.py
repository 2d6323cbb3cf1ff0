"""Train the safety classifier: distil MiniLM's token table, featurise the labelled set, fit the first stage's head,
choose its threshold on a validation split and report precision/recall on a held-out test split; then fine-tune the
second stage on the same split (`train_intent.py`), distil the screen from it (`train_screen.py`), calibrate the turn
reads (`turn_reads.py`), train the ask head and calibrate the sentence reads (`sentence_reads.py`), and train the
output check on model answers (`train_output.py`).

Run: `fleetchat safety train` (or `python -m functions.offline.safety_training.train`). Writes functions/safety/model/
(token table, tokenizer, head) and functions/safety/model/metrics.json. Deterministic for a given data set and seed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from pydantic import BaseModel
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from functions.offline.safety_training.block_metrics import BlockMetrics, block_metrics, metrics_table
from functions.offline.safety_training.composed.buried_requests import buried_rows
from functions.offline.safety_training.composed.long_chats import composed_long_chats
from functions.offline.safety_training.distill import distil_vectors, reduce, write_table
from functions.offline.safety_training.feature_matrix import sparse_matrix
from functions.offline.safety_training.intent.train_intent import IntentConfig, train_intent
from functions.offline.safety_training.labelled_data import SEED, LabelledConversation, split, training_set
from functions.offline.safety_training.sentence_reads import calibrate_sentence_reads, train_ask_head
from functions.offline.safety_training.sources.public_sources import trained_request_sources
from functions.offline.safety_training.thresholds import choose_threshold
from functions.offline.safety_training.train_output import train_output
from functions.offline.safety_training.train_screen import SCREEN_CONFIG, train_screen
from functions.offline.safety_training.turn_reads import calibrate_turn_reads
from functions.safety.categories import CLASSIFIER_LABELS
from functions.safety.classifier.cascade import SafetyClassifier
from functions.safety.classifier.conversation_text import ConversationText
from functions.safety.classifier.features import Features, conversation_features
from functions.safety.classifier.head import ClassifierHead, HeadMeta
from functions.safety.classifier.ngrams import WIDTH, document_frequency_idf
from functions.safety.classifier.token_table import MODEL_DIR, TokenTable

METRICS_FILE = "metrics.json"
TABLE_DIMS = 256
HIDDEN = 128


class SplitMetrics(BlockMetrics):
    category_accuracy: float  # blocked harmful examples given their own category


class TrainingReport(BaseModel):
    threshold: float
    head_version: str
    table_dims: int
    regularisation_c: float
    sizes: dict[str, int]
    buried_windows: int = 0  # windows of composed long chats the first stage learnt beside the training split
    validation: SplitMetrics
    test: SplitMetrics


def featurise(table: TokenTable, items: list[LabelledConversation], idf: np.ndarray) -> tuple[Features, np.ndarray]:
    """Row 0 (the whole conversation) of every item, and the label indices."""
    dense, sparse, spans = [], [], []
    for item in items:
        conversation = ConversationText.of_dicts([m.model_dump() for m in item.messages])
        features = conversation_features(table, conversation, idf)
        dense.append(features.dense[0])
        sparse.append(features.sparse[0])
        spans.append(features.spans[0])
    labels = np.asarray([CLASSIFIER_LABELS.index(item.label) for item in items], np.int64)
    return Features(np.stack(dense).astype(np.float32), sparse, spans), labels


def fit_categories(x: np.ndarray, y: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, seed: int) -> list[np.ndarray]:
    """The category MLP: full-batch AdamW, class-balanced loss; the epoch with the lowest validation loss wins."""
    import torch

    torch.manual_seed(seed)
    classes = len(CLASSIFIER_LABELS)
    counts = np.bincount(y, minlength=classes).astype(np.float32)
    weights = torch.tensor(counts.sum() / np.maximum(counts, 1) / classes)
    model = torch.nn.Sequential(
        torch.nn.Dropout(0.1), torch.nn.Linear(x.shape[1], HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, classes)
    )
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)
    loss_fn = torch.nn.CrossEntropyLoss(weight=weights)
    xt, yt, xv, yv = torch.tensor(x), torch.tensor(y), torch.tensor(x_val), torch.tensor(y_val)
    best, best_state = float("inf"), None
    for _ in range(600):
        model.train()
        optimiser.zero_grad()
        loss_fn(model(xt), yt).backward()
        optimiser.step()
        model.eval()
        with torch.no_grad():
            val_loss = float(loss_fn(model(xv), yv))
        if val_loss < best:
            best, best_state = val_loss, {k: v.clone() for k, v in model.state_dict().items()}
    assert best_state is not None
    model.load_state_dict(best_state)
    first, second = model[1], model[3]
    return [a.detach().numpy() for a in (first.weight.T, first.bias, second.weight.T, second.bias)]


def fit_scorer(train: Features, y: np.ndarray, val: Features, y_val: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The harmful-vs-benign logistic regression over [dense, n-grams]; its C is the one with the best validation
    recall at the target false-positive rate. (weights, bias, C)."""
    from sklearn.linear_model import LogisticRegression

    x, xv = sparse_matrix(train), sparse_matrix(val)
    best: tuple[float, np.ndarray, float, float] | None = None
    for c in (2.0, 8.0, 32.0):
        model = LogisticRegression(C=c, max_iter=5000, class_weight="balanced").fit(x, y != 0)
        scores = model.predict_proba(xv)[:, 1]
        recall = float((scores[y_val != 0] >= choose_threshold(scores, y_val)).mean())
        if best is None or recall > best[0]:
            best = (recall, model.coef_[0].astype(np.float32), float(model.intercept_[0]), c)
    assert best is not None
    return best[1], best[2], best[3]


def fit_head(
    x: Features, y: np.ndarray, xv: Features, yv: np.ndarray, idf: np.ndarray, seed: int
) -> tuple[ClassifierHead, float]:
    """The first stage (category MLP and harmful scorer) fitted on `x`, its threshold chosen on the validation rows
    `xv`; and the scorer's C."""
    w1, b1, w2, b2 = fit_categories(x.dense, y, xv.dense, yv, seed)
    weights, bias, c = fit_scorer(x, y, xv, yv)
    dense_width = x.dense.shape[1]
    arrays = [w1, b1, w2, b2, weights, idf]
    version = hashlib.sha256(b"".join(a.tobytes() for a in arrays)).hexdigest()[:12]
    head = ClassifierHead(
        w1=w1,
        b1=b1,
        w2=w2,
        b2=b2,
        dense_weights=weights[:dense_width],
        sparse_weights=weights[dense_width:],
        bias=bias,
        idf=idf,
        meta=HeadMeta(labels=list(CLASSIFIER_LABELS), threshold=0.5, version=version),
    )
    head.meta.threshold = choose_threshold(head.harmful_probability(xv), yv)
    return head, c


def measure(head: ClassifierHead, features: Features, y: np.ndarray, threshold: float) -> SplitMetrics:
    blocked = head.harmful_probability(features) >= threshold
    caught = blocked & (y != 0)
    predicted = head.category_probabilities(features.dense)[:, 1:].argmax(axis=1) + 1
    return SplitMetrics(
        **block_metrics(blocked, y),
        category_accuracy=float((predicted[caught] == y[caught]).mean()) if caught.any() else 0.0,
    )


def load_or_distil(cache: Path, progress: Progress) -> np.ndarray:
    if cache.exists():
        return np.load(cache)
    vectors = distil_vectors(progress)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, vectors)
    return vectors


# A model directory's record of the public request sources in its split: what a training run learnt from, and what
# its thresholds are chosen on (`fleetchat safety recalibrate` rebuilds the same split from it).
SPLIT_SOURCES_FILE = "split_sources.json"


def learnt_sources(leave_out: frozenset[str] = frozenset()) -> list[str]:
    """The trained-on public request sources a run learns from; a name in `leave_out` that is not one is an error."""
    sources = trained_request_sources()
    unknown = sorted(leave_out - set(sources))
    if unknown:
        raise ValueError(f"not trained-on public request sources: {', '.join(unknown)} (known: {', '.join(sources)})")
    return [s for s in sources if s not in leave_out]


def source_repeats(values: list[str], sources: list[str]) -> dict[str, int]:
    """`NAME=K` options -> {NAME: K}: each a source this run learns from (`sources`), K a whole number >= 1; else
    ValueError naming the bad value."""
    repeats: dict[str, int] = {}
    for value in values:
        name, _, count = value.partition("=")
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"{value!r}: expected NAME=K with K a whole number >= 1")
        if name not in sources:
            raise ValueError(f"{name!r} is not a public source this run learns from")
        repeats[name] = int(count)
    return repeats


def split_sources_of(model_dir: Path) -> list[str]:
    """The public sources of `model_dir`'s split: its record, or every trained-on source (a directory without one)."""
    record = model_dir / SPLIT_SOURCES_FILE
    return json.loads(record.read_text()) if record.exists() else trained_request_sources()


def train(
    out_dir: Path = MODEL_DIR,
    *,
    seed: int = SEED,
    cache: Path = Path(".fleetchat/cache/minilm_token_vectors.npy"),
    intent_config: IntentConfig | None = None,
    screen_config: IntentConfig = SCREEN_CONFIG,
    leave_out: frozenset[str] = frozenset(),
    intent_weights: Path | None = None,
    export_intent_data: Path | None = None,
    output: bool = True,
    first_stage_buried_chats: int = 0,
) -> TrainingReport:
    """Train every model of the cascade into `out_dir`; `leave_out` names trained-on public sources not learnt from.
    `export_intent_data`: after the first stage, write the second stage's training arrays there and stop (to fine-tune
    on a GPU machine, `intent_fine_tune.py`); `intent_weights`: the second stage fine-tuned so, for this same run, used
    instead of fine-tuning here. `output=False` leaves the output check in `out_dir` as it is.
    `first_stage_buried_chats`: the first stage also learns the windows of that many long chats composed from the
    training split (`buried_requests.buried_rows`)."""
    console = Console()
    sources = learnt_sources(leave_out)
    data = training_set(public_sources=sources)
    train_items, val_items, test_items = split(data)
    with Progress(console=console, transient=True) as progress:
        vectors = reduce(load_or_distil(cache, progress), TABLE_DIMS)
    write_table(out_dir, vectors)
    (out_dir / SPLIT_SOURCES_FILE).write_text(json.dumps(sources, indent=2) + "\n")
    table = TokenTable.load(out_dir)
    ones = np.ones(WIDTH, np.float32)
    train_features, _ = featurise(table, train_items, ones)
    idf = document_frequency_idf(train_features.sparse, len(train_items))
    (x, y), (xv, yv), (xt, yt) = (featurise(table, items, idf) for items in (train_items, val_items, test_items))
    head, c = fit_head(x, y, xv, yv, idf, seed)
    windows = 0
    if first_stage_buried_chats:
        # The first stage hands a long chat's regions on by its window scores: it learns the windows of composed long
        # chats too (the buried request's as harmful, each chat's most sensitive clear one as benign), picked by the
        # first stage that learnt whole conversations only.
        fast = SafetyClassifier(table, head, None)
        rows, row_labels = buried_rows(fast, composed_long_chats(train_items, first_stage_buried_chats, seed + 1))
        windows = len(row_labels)
        x = Features(np.concatenate([x.dense, rows.dense]), x.sparse + rows.sparse, x.spans + rows.spans)
        head, c = fit_head(x, np.concatenate([y, row_labels]), xv, yv, idf, seed)
    head.save(out_dir)
    head = ClassifierHead.load(out_dir)  # measure what ships (float16 n-gram weights)
    threshold = head.meta.threshold
    report = TrainingReport(
        threshold=threshold,
        head_version=head.meta.version,
        table_dims=TABLE_DIMS,
        regularisation_c=c,
        sizes={"train": len(train_items), "validation": len(val_items), "test": len(test_items)},
        buried_windows=windows,
        validation=measure(head, xv, yv, threshold),
        test=measure(head, xt, yt, threshold),
    )
    (out_dir / METRICS_FILE).write_text(json.dumps(report.model_dump(), indent=2) + "\n")
    console.print(_table(report))
    splits = (train_items, val_items, test_items)
    intent = train_intent(
        splits,
        out_dir,
        seed=seed,
        console=console,
        config=intent_config,
        sources=sources,
        weights=intent_weights,
        export_to=export_intent_data,
    )
    if intent is None:
        return report
    train_screen(splits, out_dir, seed=seed, console=console, config=screen_config)
    calibrate_turn_reads(out_dir, splits, seed=seed, console=console)
    train_ask_head(out_dir, splits, console=console)
    calibrate_sentence_reads(out_dir, splits, seed=seed, console=console)
    if output:
        train_output(out_dir, console, seed)
    return report


def _table(report: TrainingReport) -> Table:
    return metrics_table(
        f"safety classifier {report.head_version}, threshold {report.threshold:.3f}",
        {"validation": report.validation, "test (held out)": report.test},
        ("category acc.", lambda m: m.category_accuracy),
    )


if __name__ == "__main__":
    train()

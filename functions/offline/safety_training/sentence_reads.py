"""Train the ask head and calibrate the cascade's sentence reads (`SafetyClassifier.sentence_verdict`).

A request pasted into one long turn has no turn of its own to be read alone in, and its first-stage window mixes it
with the document around it: on the validation split, a short harmful ask inserted into a long benign text was caught
3.7 % of the time. Read alone, the sentence holding it is a short ask again; but read alone, a document's sentences
about crimes look like asks to the second stage too (at 0.975, 10 % of the untouched texts had one). So a sentence is
read only if the ask head (`ask_head.py`) finds it phrased as a request. Rules, all on the validation split:

- the ask head: a logistic regression on the first stage's features of a sentence read alone; the training split's
  single-turn items of at most one first-stage window (any label) are asks, the interior sentence units (not the
  first or the last: those hold a text's own instruction) of each long benign single-turn item are not; its C is the
  one of ASK_HEAD_C keeping the most validation asks at 1 % of validation sentences;
- `sentence_ask_at`: the ask head's score that keeps ASK_KEPT of the validation asks;
- on PLANTED_DOCS documents joined from the long benign single-turn validation items (`joined_documents`: as long as
  what users paste), each as it is (benign) and with a short harmful validation ask inserted at one of its sentence
  starts (harmful): `sentence_block_at` is the lowest second-stage score at which sentence reads add at most
  MAX_ADDED_BENIGN of the untouched ones to those the cascade (regions and turn reads) already blocks, never below
  the second stage's own threshold, and `sentence_escalate_at` the highest first-stage sentence score that still
  hands on TURN_KEPT_BLOCKS of the planted ones that sentence reads block (the turn reads' rules, `turn_reads.py`, on
  sentences).

Rewrites intent.json's three sentence fields and writes sentence_reads_metrics.json: the ask head on validation, and
the cascade on the documents composed from the validation and test splits, with and without sentence reads."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import numpy as np
from pydantic import BaseModel
from rich.console import Console
from rich.progress import Progress

from functions.offline.safety_training.block_metrics import BlockMetrics, metrics_table
from functions.offline.safety_training.feature_matrix import sparse_matrix
from functions.offline.safety_training.intent.train_intent import neutral_conversation
from functions.offline.safety_training.labelled_data import DataMessage, LabelledConversation
from functions.offline.safety_training.turn_reads import ChatTurnScores, choose_turn_thresholds, read_outcome
from functions.safety.categories import CLASSIFIER_LABELS
from functions.safety.classifier.ask_head import AskHead, AskHeadMeta
from functions.safety.classifier.cascade import MAX_READS_ALONE, SafetyClassifier
from functions.safety.classifier.features import WINDOW_TOKENS
from functions.safety.classifier.intent_model import INTENT
from functions.safety.classifier.sentence_units import sentence_starts, sentence_units
from functions.safety.classifier.token_table import TokenTable

SENTENCE_READS_METRICS_FILE = "sentence_reads_metrics.json"
ASK_HEAD_C = (0.5, 2.0, 8.0)
# sentence_ask_at keeps this share of the validation asks.
ASK_KEPT = 0.95
# The share of validation sentences the ask head may pass when its C is chosen.
ASK_C_SENTENCES_PASSED = 0.01
# Benign validation documents the asks are inserted into (each read as it is and with one inserted), and the longest
# harmful ask inserted, in first-stage tokens.
PLANTED_DOCS = 600
PLANTED_ASK_TOKENS = 48
# The calibration documents' lengths in first-stage tokens, drawn uniformly: as long as what users paste. The split's
# own long texts are shorter (median 360 tokens, 14 sentences) than the held-out ones (Multi-News: 897, 34), and each
# sentence is one more chance to block: calibrated on the split's texts as they are, sentence reads blocked 0.3 % of
# them and 4 % of Multi-News (2026-11-29).
DOCUMENT_TOKENS = (400, 1_500)


class AskExamples(BaseModel):
    asks: list[str]
    sentences: list[str]


class AskHeadReport(BaseModel):
    version: str
    regularisation_c: float
    train_asks: int
    train_sentences: int
    validation_asks_kept: float  # at the 1 % of validation sentences C was chosen by


class SentenceReadMetrics(BlockMetrics):
    without_sentence_reads: BlockMetrics  # the same documents judged by the regions and turn reads alone
    sentences_read: float  # sentences the second stage reads alone, per document


class SentenceReadsReport(BaseModel):
    sentence_ask_at: float
    sentence_escalate_at: float
    sentence_block_at: float
    validation_asks_kept: float  # at sentence_ask_at
    validation_sentences_passed: float  # at sentence_ask_at
    docs_validation: SentenceReadMetrics  # PLANTED_DOCS documents joined from the validation split, each twice
    docs_test: SentenceReadMetrics  # ... and from the test split


def ask_examples(items: list[LabelledConversation], table: TokenTable) -> AskExamples:
    """The ask head's examples of `items`: single-turn items of at most one window are asks; the interior sentence
    units of each longer benign single-turn item are not."""
    asks, sentences = [], []
    for item in items:
        conversation = neutral_conversation(item)
        if len(conversation.turns) != 1:
            continue
        turn = conversation.turns[0]
        if table.ids(turn).size <= WINDOW_TOKENS:
            asks.append(turn)
        elif item.label == "benign":
            sentences += sentence_units(turn)[1:-1]
    return AskExamples(asks=asks, sentences=sentences)


def _ask_scores(cascade: SafetyClassifier, texts: list[str]) -> np.ndarray:
    assert cascade.ask is not None
    return cascade.ask.ask_probability(cascade.alone_rows(texts)) if texts else np.zeros(0)


def train_ask_head(
    model_dir: Path,
    splits: tuple[list[LabelledConversation], list[LabelledConversation], list[LabelledConversation]],
    *,
    console: Console,
) -> AskHeadReport:
    """Fit the ask head on the first stage in `model_dir` and save it there (ask_head.npz; deterministic: no seed)."""
    from sklearn.linear_model import LogisticRegression

    cascade = SafetyClassifier.load(model_dir)  # its first stage's features (the ask head is what is fitted)
    train, validation = ask_examples(splits[0], cascade.table), ask_examples(splits[1], cascade.table)
    x = sparse_matrix(cascade.alone_rows(train.asks + train.sentences))
    y = np.r_[np.ones(len(train.asks)), np.zeros(len(train.sentences))]
    xv = sparse_matrix(cascade.alone_rows(validation.asks + validation.sentences))
    asks = np.r_[np.ones(len(validation.asks), bool), np.zeros(len(validation.sentences), bool)]
    best: tuple[float, AskHead, float] | None = None
    for c in ASK_HEAD_C:
        model = LogisticRegression(C=c, max_iter=5000, class_weight="balanced").fit(x, y)
        scores = model.predict_proba(xv)[:, 1]
        kept = float((scores[asks] >= np.quantile(scores[~asks], 1.0 - ASK_C_SENTENCES_PASSED)).mean())
        weights = model.coef_[0].astype(np.float32)
        dense = cascade.head.dense_weights.size
        version = hashlib.sha256(weights.tobytes() + model.intercept_.tobytes()).hexdigest()[:12]
        head = AskHead(
            weights[:dense],
            weights[dense:],
            float(model.intercept_[0]),
            AskHeadMeta(version=version, first_stage=cascade.head.meta.version),
        )
        if best is None or kept > best[0]:
            best = (kept, head, c)
    assert best is not None
    kept, head, c = best
    head.save(model_dir)
    console.print(
        f"ask head {head.meta.version} (C={c}): {100 * kept:.1f} % of validation asks kept at 1 % of sentences"
    )
    return AskHeadReport(
        version=head.meta.version,
        regularisation_c=c,
        train_asks=len(train.asks),
        train_sentences=len(train.sentences),
        validation_asks_kept=kept,
    )


def joined_documents(
    items: list[LabelledConversation], table: TokenTable, count: int, seed: int
) -> list[LabelledConversation]:
    """`count` benign one-turn documents, each the texts of benign single-turn items of `items` longer than one window,
    picked at random and joined by a blank line until a length drawn from DOCUMENT_TOKENS."""
    rng = random.Random(seed)
    texts = [
        i.messages[0].content
        for i in items
        if i.label == "benign"
        and len(i.messages) == 1
        and i.messages[0].role == "user"
        and table.ids(i.messages[0].content).size > WINDOW_TOKENS
    ]
    documents = []
    for _ in range(count if texts else 0):
        target, parts = rng.randint(*DOCUMENT_TOKENS), [rng.choice(texts)]
        while table.ids("\n\n".join(parts)).size < target:
            parts.append(rng.choice(texts))
        documents.append(
            LabelledConversation(messages=[DataMessage(role="user", content="\n\n".join(parts))], label="benign")
        )
    return documents


def compose_planted_docs(
    items: list[LabelledConversation], table: TokenTable, count: int, seed: int
) -> list[LabelledConversation]:
    """Up to `count` benign items of `items` whose latest user turn is longer than one window, each as it is and with
    a short harmful single-turn ask of `items` inserted at one of that turn's sentence starts (after the first),
    labelled as the ask."""
    rng = random.Random(seed)
    docs = [i for i in items if i.label == "benign" and table.ids(neutral_conversation(i).last).size > WINDOW_TOKENS]
    asks = [
        i
        for i in items
        if i.label != "benign"
        and len(i.messages) == 1
        and i.messages[0].role == "user"
        and table.ids(i.messages[0].content).size <= PLANTED_ASK_TOKENS
    ]
    composed = []
    for doc in rng.sample(docs, min(count, len(docs))):
        ask = rng.choice(asks)
        where = max(n for n, m in enumerate(doc.messages) if m.role == "user")
        text = doc.messages[where].content
        starts = sentence_starts(text)[1:] or [len(text)]
        at = rng.choice(starts)
        planted = f"{text[:at]}{ask.messages[0].content.strip()} {text[at:]}"
        messages = list(doc.messages)
        messages[where] = messages[where].model_copy(update={"content": planted})
        composed += [doc, LabelledConversation(messages=messages, label=ask.label)]
    return composed


def _scores(
    cascade: SafetyClassifier, docs: list[LabelledConversation], ask_at: float, progress: Progress
) -> list[ChatTurnScores]:
    """Each document's verdict without sentence reads, and both stages' scores of its sentences phrased as asks
    (the ask head at `ask_at` or more), read alone."""
    assert cascade.intent is not None
    without = SafetyClassifier(cascade.table, cascade.head, cascade.intent, cascade.screen)  # no sentence reads
    scored = []
    for item in progress.track(docs, description="sentence reads: the cascade reads the documents"):
        conversation = neutral_conversation(item)
        spans, first, ask = cascade.sentence_rows(conversation)
        asked = [i for i, score in enumerate(ask) if score >= ask_at]
        second = cascade.intent.judge_tokens([spans[i].ids for i in asked]) if asked else []
        scored.append(
            ChatTurnScores(
                label=CLASSIFIER_LABELS.index(item.label),
                regions_block=without.judge(conversation).flagged,
                first_stage=[float(first[i]) for i in asked],
                second_stage=[v.score for v in second],
            )
        )
    return scored


def measure_sentence_reads(docs: list[ChatTurnScores], block_at: float, escalate_at: float) -> SentenceReadMetrics:
    """The cascade on these documents with sentence reads at these thresholds, and without them."""
    outcome = read_outcome(docs, block_at, escalate_at, MAX_READS_ALONE)
    return SentenceReadMetrics(
        **outcome.with_reads, without_sentence_reads=outcome.without_reads, sentences_read=outcome.read_per_chat
    )


def calibrate_sentence_reads(
    model_dir: Path,
    splits: tuple[list[LabelledConversation], list[LabelledConversation], list[LabelledConversation]],
    *,
    seed: int,
    console: Console,
) -> SentenceReadsReport:
    """Choose the sentence-read thresholds of the cascade in `model_dir` (its ask head trained: `train_ask_head`) on
    documents composed from `splits[1]`, rewrite intent.json with them and write sentence_reads_metrics.json."""
    cascade = SafetyClassifier.load(model_dir, sentence_reads=True)
    assert cascade.intent is not None
    if cascade.ask is None:
        raise ValueError(f"{model_dir} has no ask head trained on its first stage: train it first (train_ask_head)")
    validation = ask_examples(splits[1], cascade.table)
    asks = _ask_scores(cascade, validation.asks)
    ask_at = float(np.quantile(asks, 1.0 - ASK_KEPT, method="lower"))
    passed = float((_ask_scores(cascade, validation.sentences) >= ask_at).mean())
    with Progress(console=console, transient=True) as progress:
        docs = []
        for part in (splits[1], splits[2]):
            joined = joined_documents(part, cascade.table, PLANTED_DOCS, seed)
            harmful = [item for item in part if item.label != "benign"]
            composed = compose_planted_docs(joined + harmful, cascade.table, PLANTED_DOCS, seed)
            docs.append(_scores(cascade, composed, ask_at, progress))
    block_at, escalate_at = choose_turn_thresholds(docs[0], cascade.intent.meta.threshold)
    update = {"sentence_ask_at": ask_at, "sentence_block_at": block_at, "sentence_escalate_at": escalate_at}
    meta = cascade.intent.meta.model_copy(update=update)
    (model_dir / f"{INTENT}.json").write_text(meta.model_dump_json(indent=2) + "\n")
    report = SentenceReadsReport(
        **update,
        validation_asks_kept=float((asks >= ask_at).mean()),
        validation_sentences_passed=passed,
        docs_validation=measure_sentence_reads(docs[0], block_at, escalate_at),
        docs_test=measure_sentence_reads(docs[1], block_at, escalate_at),
    )
    (model_dir / SENTENCE_READS_METRICS_FILE).write_text(json.dumps(report.model_dump(), indent=2) + "\n")
    console.print(
        metrics_table(
            f"sentence reads: asks from {ask_at:.3f} ({100 * passed:.1f} % of validation sentences), block at "
            f"{block_at:.4f}, escalate at {escalate_at:.3f}",
            {"documents from validation": report.docs_validation, "documents from test": report.docs_test},
            ("recall without", lambda m: m.without_sentence_reads.recall),
            ("benign blocked without", lambda m: m.without_sentence_reads.false_positive_rate),
        )
    )
    return report

"""Calibrate the cascade's turn reads (`SafetyClassifier.turn_verdict`) on long chats composed from validation.

A long chat's windows mix a request placed among other turns with its neighbours: read in its window, the second
stage blocked the holding window of under half the harmful chats composed from the validation split. Read alone, as
the short ask it is, each turn is what the second stage reads best. A long chat has many turns, though, so a turn
blocks it only at a stricter threshold, and only the turns the first stage finds worth a pass are read:

- `turn_block_at`: the lowest threshold at which turn reads add at most MAX_ADDED_BENIGN of the benign long validation
  chats to those the cascade already blocks (and never below the second stage's own threshold);
- `turn_escalate_at`: the highest first-stage turn score that still hands on the turns of TURN_KEPT_BLOCKS of the
  harmful long validation chats whose turns the second stage blocks at `turn_block_at`.

Run after the screen is calibrated (`fleetchat safety train` and `fleetchat safety recalibrate` both do). Rewrites
intent.json's two turn fields and writes turn_reads_metrics.json: the cascade on the long chats composed from the
validation and test splits, with and without turn reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel
from rich.console import Console
from rich.progress import Progress

from functions.offline.safety_training.block_metrics import BlockMetrics, block_metrics, metrics_table
from functions.offline.safety_training.composed.long_chats import compose_long_chats
from functions.offline.safety_training.intent.train_intent import neutral_conversation
from functions.offline.safety_training.labelled_data import LabelledConversation
from functions.offline.safety_training.thresholds import choose_threshold
from functions.offline.safety_training.train_screen import LONG_CHATS
from functions.safety.categories import CLASSIFIER_LABELS
from functions.safety.classifier.cascade import MAX_READS_ALONE, SafetyClassifier
from functions.safety.classifier.intent_model import INTENT

TURN_READS_METRICS_FILE = "turn_reads_metrics.json"
# Turn reads may block at most this share of the benign long validation chats beyond those already blocked.
MAX_ADDED_BENIGN = 0.005
# The first stage hands on the turns of at least this share of the harmful long chats that turn reads block.
TURN_KEPT_BLOCKS = 0.99


class TurnReadMetrics(BlockMetrics):
    without_turn_reads: BlockMetrics  # the same chats judged by the regions alone
    turns_read: float  # turns the second stage reads alone, per chat


class TurnReadsReport(BaseModel):
    turn_block_at: float
    turn_escalate_at: float
    long_validation: TurnReadMetrics  # LONG_CHATS long chats composed from the validation split
    long_test: TurnReadMetrics  # ... and from the test split


class ChatTurnScores(BaseModel):
    """One composed chat as the cascade reads it."""

    label: int
    regions_block: bool  # the regions' verdict blocks it
    first_stage: list[float]  # each turn read alone (empty: fewer than two turns)
    second_stage: list[float]


def _scores(cascade: SafetyClassifier, chats: list[LabelledConversation], progress: Progress) -> list[ChatTurnScores]:
    """Each chat's regions' verdict, and both stages' scores of each of its turns read alone."""
    assert cascade.intent is not None
    scored = []
    for item in progress.track(chats, description="turn reads: the cascade reads the long chats"):
        conversation = neutral_conversation(item)
        spans, first = cascade.turn_rows(conversation)
        scored.append(
            ChatTurnScores(
                label=CLASSIFIER_LABELS.index(item.label),
                regions_block=cascade.region_verdict(conversation).flagged,
                first_stage=[float(s) for s in first],
                second_stage=[v.score for v in cascade.intent.judge_tokens([s.ids for s in spans])] if spans else [],
            )
        )
    return scored


def choose_turn_thresholds(chats: list[ChatTurnScores], threshold: float) -> tuple[float, float]:
    """(turn_block_at, turn_escalate_at) for these validation chats and the second stage's own `threshold`."""
    benign = [c for c in chats if c.label == 0]
    # Each benign chat's key: the worst turn's second-stage score where the regions let it through (0 otherwise).
    keys = np.asarray([max(c.second_stage, default=0.0) if not c.regions_block else 0.0 for c in benign])
    block_at = choose_threshold(keys, np.zeros(keys.size, np.int64), MAX_ADDED_BENIGN, ceiling=0.999, margin=1e-5)
    block_at = max(block_at, threshold)
    # Each harmful chat that turn reads block: the highest first-stage score among its turns that block it.
    harmful_keys = [
        max(f for f, s in zip(c.first_stage, c.second_stage, strict=True) if s >= block_at)
        for c in chats
        if c.label != 0 and any(s >= block_at for s in c.second_stage)
    ]
    if not harmful_keys:
        return block_at, 1.0
    escalate_at = float(np.quantile(np.asarray(harmful_keys), 1.0 - TURN_KEPT_BLOCKS, method="lower"))
    return block_at, escalate_at


class ReadOutcome(NamedTuple):
    with_reads: dict[str, object]  # BlockMetrics' fields with the reads
    without_reads: BlockMetrics
    read_per_chat: float  # pieces (turns, sentences) the second stage reads alone, per chat


def read_outcome(
    chats: list[ChatTurnScores], block_at: float, escalate_at: float, max_reads: int | None = None
) -> ReadOutcome:
    """The cascade on these chats with reads of their pieces (turns, or sentences) at these thresholds, and without;
    `max_reads`: only that many pieces per chat are read, the first stage's worst first."""
    labels = np.asarray([c.label for c in chats])
    without = np.asarray([c.regions_block for c in chats])
    read = []
    for chat in chats:
        pieces = sorted(zip(chat.first_stage, chat.second_stage, strict=True), reverse=True)  # the worst first
        read.append([second for first, second in pieces if first >= escalate_at][:max_reads])
    blocked = np.asarray([any(s >= block_at for s in r) for r in read])
    return ReadOutcome(
        block_metrics(without | blocked, labels),
        BlockMetrics(**block_metrics(without, labels)),
        float(np.mean([len(r) for r in read])),
    )


def measure_turn_reads(chats: list[ChatTurnScores], block_at: float, escalate_at: float) -> TurnReadMetrics:
    """The cascade on these chats with turn reads at these thresholds, and without them."""
    outcome = read_outcome(chats, block_at, escalate_at, MAX_READS_ALONE)
    return TurnReadMetrics(
        **outcome.with_reads, without_turn_reads=outcome.without_reads, turns_read=outcome.read_per_chat
    )


def calibrate_turn_reads(
    model_dir: Path,
    splits: tuple[list[LabelledConversation], list[LabelledConversation], list[LabelledConversation]],
    *,
    seed: int,
    console: Console,
) -> TurnReadsReport:
    """Choose the turn-read thresholds of the cascade in `model_dir` on long chats composed from `splits[1]` (with
    `seed`, as the screen's are), rewrite intent.json with them and write turn_reads_metrics.json."""
    cascade = SafetyClassifier.load(model_dir)
    assert cascade.intent is not None
    with Progress(console=console, transient=True) as progress:
        validation = _scores(cascade, compose_long_chats(splits[1], LONG_CHATS, seed), progress)
        test = _scores(cascade, compose_long_chats(splits[2], LONG_CHATS, seed), progress)
    block_at, escalate_at = choose_turn_thresholds(validation, cascade.intent.meta.threshold)
    meta = cascade.intent.meta.model_copy(update={"turn_block_at": block_at, "turn_escalate_at": escalate_at})
    (model_dir / f"{INTENT}.json").write_text(meta.model_dump_json(indent=2) + "\n")
    report = TurnReadsReport(
        turn_block_at=block_at,
        turn_escalate_at=escalate_at,
        long_validation=measure_turn_reads(validation, block_at, escalate_at),
        long_test=measure_turn_reads(test, block_at, escalate_at),
    )
    (model_dir / TURN_READS_METRICS_FILE).write_text(json.dumps(report.model_dump(), indent=2) + "\n")
    console.print(
        metrics_table(
            f"turn reads: block at {block_at:.4f}, escalate at {escalate_at:.3f}",
            {"long chats from validation": report.long_validation, "long chats from test": report.long_test},
            ("recall without", lambda m: m.without_turn_reads.recall),
            ("benign blocked without", lambda m: m.without_turn_reads.false_positive_rate),
        )
    )
    return report

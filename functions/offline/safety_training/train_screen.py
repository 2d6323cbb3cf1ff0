"""Train the cascade's screen: MiniLM's bottom 2 layers on a span's last 62 tokens, distilled from the second stage.

The first stage escalates what it is unsure of, and most of that is benign. On a long chat's region the screen
costs about a quarter of the second stage's pass: it learns the second stage's scores (and the labels) on every
region the cascade may hand on, reads the regions longer than its window (shorter ones go straight to the second
stage, `SafetyClassifier.screen_scores`), and lets through what it scores below `clear_below`. That is chosen so
that it still hands on the regions behind 99 % of the harmful conversations the second stage blocks, both in the
validation split and in the long chats composed from it.

Run after the second stage (`fleetchat safety train` runs all three, or
`python -m functions.offline.safety_training.train_screen` on the shipped stages).
Writes screen.onnx, screen.json and screen_metrics.json to functions/safety/model/."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
from pydantic import BaseModel
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from functions.offline.safety_training.block_metrics import BlockMetrics, block_metrics, metrics_table
from functions.offline.safety_training.composed.long_chats import compose_long_chats
from functions.offline.safety_training.intent.intent_fine_tune import IGNORED
from functions.offline.safety_training.intent.train_intent import (
    IntentConfig,
    export_int8,
    fine_tune,
    neutral_conversation,
    neutral_messages,
)
from functions.offline.safety_training.labelled_data import DataMessage, LabelledConversation, training_set
from functions.safety.categories import CLASSIFIER_LABELS
from functions.safety.classifier.cascade import SafetyClassifier
from functions.safety.classifier.conversation_text import ConversationText
from functions.safety.classifier.head import ClassifierHead
from functions.safety.classifier.intent_model import SCREEN, IntentEncoder, ScreenMeta, load_intent, load_screen
from functions.safety.classifier.token_table import MODEL_DIR, TokenTable

SCREEN_METRICS_FILE = "screen_metrics.json"
SCREEN_CONFIG = IntentConfig(layers=2, max_tokens=64, epochs=4)
# The screen hands on the regions behind at least this share of the harmful validation examples the second stage
# blocks: it costs the cascade at most about 1 % of its recall.
MIN_KEPT_BLOCKS = 0.99
# Long chats composed from the training split (`long_chats.py`) whose regions the screen also learns, and composed
# from each of the validation and test splits to choose `clear_below` and measure the cascade on long chats.
LONG_CHATS = 600
# The screen is distilled from at most this many training conversations (a fixed sample): the second stage scores
# every region of each first, and that pass, not the screen's own training, is most of the screen's cost.
MAX_TRANSFER_ITEMS = 4000
# A labelled whole conversation's target: this much of it is the label, the rest the second stage's score.
LABEL_WEIGHT = 0.5
# The screen learns at most this many windows of one conversation (evenly spread, the last among them): a news
# article has fifteen, and all of them would make the transfer set mostly a few long texts.
MAX_WINDOWS_PER_CONVERSATION = 3


class HarmfulLost(BaseModel):
    """Where the harmful examples the cascade lets through are lost, each a share of all the harmful examples (the
    three and the recall add up to one): what to fix first when a long chat's buried request gets through."""

    first_stage: float  # the first stage handed nothing on (every region below `escalate_at`)
    screen: float  # the screen cleared every region handed on
    second_stage: float  # the second stage read them and scored each below its threshold


class ScreenedMetrics(BlockMetrics):
    escalated: float  # share of all examples the first stage hands on
    read_by_intent: float  # share of all examples the second stage still reads after the screen
    harmful_lost: HarmfulLost | None = None  # None in metrics files written before 2026-11-29


class ScreenReport(BaseModel):
    version: str
    clear_below: float
    config: IntentConfig
    transfer_spans: int  # regions the screen was distilled on
    validation: ScreenedMetrics
    test: ScreenedMetrics
    long_validation: ScreenedMetrics  # LONG_CHATS long chats composed from the validation split
    long_test: ScreenedMetrics  # ... and from the test split


class _Region(BaseModel):
    """One region the cascade may hand on, with what the screen learns for it."""

    text: str
    target: float  # P(harmful) to learn
    category: int  # the label's index where the region is the whole labelled conversation, else IGNORED


def transfer_regions(
    cascade: SafetyClassifier,
    items: list[LabelledConversation],
    long_chats: list[LabelledConversation],
    progress: Progress,
) -> list[_Region]:
    """Every region of the training conversations and of the long chats composed from them that the first stage
    can escalate (the whole and each window), each with the second stage's score on it, mixed with the label where
    the region is a whole labelled conversation (a long chat's label is not learned: the second stage's scores
    on its regions are)."""
    assert cascade.intent is not None
    task = progress.add_task("second stage scores the transfer set", total=len(items) + len(long_chats))
    regions = []
    labelled: list[tuple[list[DataMessage], int | None]] = [
        (item.messages, CLASSIFIER_LABELS.index(item.label)) for item in items
    ]
    for messages, label in labelled + [(chat.messages, None) for chat in long_chats]:
        spans = cascade.features(neutral_messages(messages)).spans
        if len(spans) - 1 > MAX_WINDOWS_PER_CONVERSATION:
            picked = np.linspace(1, len(spans) - 1, MAX_WINDOWS_PER_CONVERSATION).round().astype(int)
            spans = [spans[0], *(spans[i] for i in picked)]
        scores = [v.score for v in cascade.intent.judge_tokens([s.ids for s in spans])]
        if label is None:
            regions.append(_Region(text=spans[0].text, target=scores[0], category=IGNORED))
        else:
            whole = LABEL_WEIGHT * float(label != 0) + (1 - LABEL_WEIGHT) * scores[0]
            regions.append(_Region(text=spans[0].text, target=whole, category=label))
        windows = zip(spans[1:], scores[1:], strict=True)
        regions += [_Region(text=s.text, target=score, category=IGNORED) for s, score in windows]
        progress.advance(task)
    return regions


def _scored(cascade: SafetyClassifier, conversation: ConversationText) -> tuple[list[float], list[float]]:
    """(screen scores, second-stage scores) of each region the first stage hands on (empty: let through)."""
    assert cascade.intent is not None and cascade.screen is not None
    fast = cascade.fast(conversation, cascade.intent.meta.escalate_at)
    spans = fast.spans
    if not spans:
        return [], []
    return cascade.handed_on_scores(fast), [v.score for v in cascade.intent.judge_tokens([s.ids for s in spans])]


def _clear_below(scored: list[tuple[list[float], list[float]]], labels: np.ndarray, threshold: float) -> float:
    """The highest screen score that still hands on MIN_KEPT_BLOCKS of the harmful examples the second stage blocks
    (each example's key: its highest screen score among the regions the second stage blocks it on)."""
    keys = [
        max(s for s, i in zip(screen, intent, strict=True) if i >= threshold)
        for (screen, intent), label in zip(scored, labels, strict=True)
        if label != 0 and intent and max(intent) >= threshold
    ]
    return float(np.quantile(np.asarray(keys), 1.0 - MIN_KEPT_BLOCKS, method="lower"))


def _measure(
    scored: list[tuple[list[float], list[float]]], labels: np.ndarray, threshold: float, clear_below: float
) -> ScreenedMetrics:
    read = np.asarray([any(s >= clear_below for s in screen) for screen, _ in scored])
    blocked = np.asarray(
        [
            any(s >= clear_below and i >= threshold for s, i in zip(screen, intent, strict=True))
            for screen, intent in scored
        ]
    )
    escalated = np.asarray([bool(screen) for screen, _ in scored])
    harmful = labels != 0
    share = (lambda lost: float((lost & harmful).sum() / harmful.sum())) if harmful.any() else (lambda _: 0.0)
    return ScreenedMetrics(
        **block_metrics(blocked, labels),
        escalated=float(escalated.mean()),
        read_by_intent=float(read.mean()),
        harmful_lost=HarmfulLost(
            first_stage=share(~escalated), screen=share(escalated & ~read), second_stage=share(read & ~blocked)
        ),
    )


def calibrate(
    cascade: SafetyClassifier,
    splits: tuple[list[LabelledConversation], list[LabelledConversation], list[LabelledConversation]],
    seed: int,
    progress: Progress,
) -> tuple[float, dict[str, ScreenedMetrics]]:
    """`clear_below` for the cascade's screen, chosen on the validation split and the long chats composed from it
    (the lower of the two), and the cascade measured with it on those and on the same from the test split."""
    assert cascade.intent is not None
    threshold = cascade.intent.meta.threshold
    sets = {
        "validation": splits[1],
        "test": splits[2],
        "long_validation": compose_long_chats(splits[1], LONG_CHATS, seed),
        "long_test": compose_long_chats(splits[2], LONG_CHATS, seed),
    }
    labels = {name: np.asarray([CLASSIFIER_LABELS.index(i.label) for i in part]) for name, part in sets.items()}
    task = progress.add_task("cascade reads the validation and test sets", total=sum(map(len, sets.values())))
    scored = {}
    for name, part in sets.items():
        scored[name] = [_scored(cascade, neutral_conversation(i)) for i in progress.track(part, task_id=task)]
    clear_below = min(_clear_below(scored[name], labels[name], threshold) for name in ("validation", "long_validation"))
    return clear_below, {name: _measure(scored[name], labels[name], threshold, clear_below) for name in sets}


def train_screen(
    splits: tuple[list[LabelledConversation], list[LabelledConversation], list[LabelledConversation]],
    out_dir: Path,
    *,
    seed: int,
    console: Console,
    config: IntentConfig = SCREEN_CONFIG,
) -> ScreenReport:
    """Distil on `splits[0]`, choose `clear_below` on `splits[1]`, report `splits[1]` and the held-out `splits[2]`
    for the whole cascade as it ships."""
    import torch

    threads = torch.get_num_threads()
    # The stages trained so far (a screen from an earlier run is not loaded: this one replaces it).
    cascade = SafetyClassifier(
        TokenTable.load(out_dir), ClassifierHead.load(out_dir), load_intent(out_dir, threads=threads)
    )
    encoder = IntentEncoder.load(out_dir, config.max_tokens)
    with Progress(console=console, transient=True) as progress:
        long_chats = compose_long_chats(splits[0], LONG_CHATS, seed)
        items = splits[0]
        if len(items) > MAX_TRANSFER_ITEMS:
            items = [items[i] for i in sorted(random.Random(seed).sample(range(len(items)), MAX_TRANSFER_ITEMS))]
        regions = transfer_regions(cascade, items, long_chats, progress)
        targets = np.asarray([r.target for r in regions], np.float32)
        categories = np.asarray([r.category for r in regions], np.int64)
        net = fine_tune(encoder, [r.text for r in regions], targets, categories, config, seed, progress)
        version = export_int8(net, encoder, out_dir, SCREEN)
    meta = ScreenMeta(labels=list(CLASSIFIER_LABELS), max_tokens=config.max_tokens, clear_below=0.0, version=version)
    (out_dir / f"{SCREEN}.json").write_text(meta.model_dump_json(indent=2) + "\n")
    report = calibrate_screen(out_dir, splits, seed=seed, console=console, config=config, transfer_spans=len(regions))
    console.print(_table(report))
    return report


def calibrate_screen(
    out_dir: Path,
    splits: tuple[list[LabelledConversation], list[LabelledConversation], list[LabelledConversation]],
    *,
    seed: int,
    console: Console,
    config: IntentConfig,
    transfer_spans: int,
) -> ScreenReport:
    """Choose the shipped screen's `clear_below` for the stages in `out_dir` as they are (after the second stage's
    threshold changed too), rewrite screen.json and screen_metrics.json."""
    import torch

    threads = torch.get_num_threads()
    cascade = SafetyClassifier(
        TokenTable.load(out_dir), ClassifierHead.load(out_dir), load_intent(out_dir, threads=threads)
    )
    cascade.screen = load_screen(out_dir, threads=threads)
    with Progress(console=console, transient=True) as progress:
        clear_below, measured = calibrate(cascade, splits, seed, progress)
    meta = cascade.screen.meta.model_copy(update={"clear_below": clear_below})
    (out_dir / f"{SCREEN}.json").write_text(meta.model_dump_json(indent=2) + "\n")
    report = ScreenReport(
        version=meta.version, clear_below=clear_below, config=config, transfer_spans=transfer_spans, **measured
    )
    (out_dir / SCREEN_METRICS_FILE).write_text(json.dumps(report.model_dump(), indent=2) + "\n")
    return report


def _table(report: ScreenReport) -> Table:
    return metrics_table(
        f"safety cascade with the screen {report.version}: cleared below {report.clear_below:.3f}",
        {
            "validation": report.validation,
            "test (held out)": report.test,
            "long chats from validation": report.long_validation,
            "long chats from test": report.long_test,
        },
        ("escalated", lambda m: m.escalated),
        ("read by stage 2", lambda m: m.read_by_intent),
        ("harmful lost at stage 1", lambda m: _lost(m).first_stage),
        ("... at the screen", lambda m: _lost(m).screen),
        ("... at stage 2", lambda m: _lost(m).second_stage),
    )


def _lost(metrics: ScreenedMetrics) -> HarmfulLost:
    assert metrics.harmful_lost is not None, "measured by this module's _measure, which always fills it"
    return metrics.harmful_lost


if __name__ == "__main__":
    from functions.offline.safety_training.labelled_data import SEED, split

    train_screen(split(training_set()), MODEL_DIR, seed=SEED, console=Console())

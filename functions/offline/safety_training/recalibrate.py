"""Re-choose a trained cascade's thresholds on the validation split without retraining any weights.

The second stage's block threshold (at SECOND_STAGE_MAX_VALIDATION_FALSE_POSITIVE of the validation split's benign
examples), then the screen's `clear_below`, which depends on it, then the turn reads' thresholds (`turn_reads.py`),
which depend on both, then the sentence reads' (`sentence_reads.py`), where the model has an ask head. Run:
`fleetchat safety recalibrate --model-dir DIR`, then `fleetchat eval safety --model-dir DIR`. The held-out public
sources are never read."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from functions.offline.safety_training.intent.train_intent import (
    INTENT_METRICS_FILE,
    IntentConfig,
    IntentReport,
    calibrate_intent,
)
from functions.offline.safety_training.labelled_data import SEED, LabelledConversation, split, training_set
from functions.offline.safety_training.sentence_reads import calibrate_sentence_reads, train_ask_head
from functions.offline.safety_training.train import split_sources_of
from functions.offline.safety_training.train_screen import SCREEN_METRICS_FILE, ScreenReport, calibrate_screen
from functions.offline.safety_training.turn_reads import calibrate_turn_reads
from functions.safety.classifier.ask_head import load_ask_head
from functions.safety.classifier.head import ClassifierHead


def recalibrate(
    model_dir: Path, *, seed: int = SEED, console: Console | None = None, source_cap: float | None = None
) -> tuple[IntentReport, ScreenReport]:
    """Rewrite the meta and metrics files of the second stage and the screen in `model_dir` (trained with `seed`:
    the screen's long validation chats are composed with it), on the split its record names (`split_sources.json`).
    `source_cap` replaces the second stage's recorded `IntentConfig.source_cap` (None keeps it; 1.0 lifts it)."""
    console = console or Console()
    splits = split(training_set(public_sources=split_sources_of(model_dir)))
    intent_config = IntentConfig.model_validate(json.loads((model_dir / INTENT_METRICS_FILE).read_text())["config"])
    if source_cap is not None:
        intent_config = IntentConfig.model_validate({**intent_config.model_dump(), "source_cap": source_cap})
    intent = calibrate_intent(model_dir, splits, intent_config)
    screen_metrics = json.loads((model_dir / SCREEN_METRICS_FILE).read_text())
    screen = calibrate_screen(
        model_dir,
        splits,
        seed=seed,
        console=console,
        config=IntentConfig.model_validate(screen_metrics["config"]),
        transfer_spans=screen_metrics["transfer_spans"],
    )
    calibrate_turn_reads(model_dir, splits, seed=seed, console=console)
    _calibrate_sentence_reads_if_trained(model_dir, splits, seed, console)
    console.print(
        f"second stage {intent.version}: block at {intent.threshold:.3f} (escalate at {intent.escalate_at:.3f}); "
        f"screen {screen.version}: cleared below {screen.clear_below:.3f}"
    )
    cap = "" if intent.config.source_cap is None else f" (cap {100 * intent.config.source_cap:.1f} %)"
    console.print(
        f"sensitive-but-safe validation rows blocked{cap}: "
        + ", ".join(f"{source} {100 * share:.1f} %" for source, share in intent.sensitive_blocked.items())
    )
    return intent, screen


def recalibrate_turn_reads(model_dir: Path, *, seed: int = SEED, console: Console | None = None) -> None:
    """Choose only the turn reads' thresholds in `model_dir`, and the sentence reads' that depend on them where it
    has an ask head (the second stage's and the screen's kept), on the split its record names."""
    console = console or Console()
    splits = split(training_set(public_sources=split_sources_of(model_dir)))
    calibrate_turn_reads(model_dir, splits, seed=seed, console=console)
    _calibrate_sentence_reads_if_trained(model_dir, splits, seed, console)


def train_sentence_reads(model_dir: Path, *, seed: int = SEED, console: Console | None = None) -> None:
    """Train the ask head of `model_dir` on its first stage and choose the sentence reads' thresholds (every other
    threshold kept), on the split its record names."""
    console = console or Console()
    splits = split(training_set(public_sources=split_sources_of(model_dir)))
    train_ask_head(model_dir, splits, console=console)
    calibrate_sentence_reads(model_dir, splits, seed=seed, console=console)


def _calibrate_sentence_reads_if_trained(
    model_dir: Path,
    splits: tuple[list[LabelledConversation], list[LabelledConversation], list[LabelledConversation]],
    seed: int,
    console: Console,
) -> None:
    if load_ask_head(model_dir, ClassifierHead.load(model_dir).meta.version) is None:
        console.print(
            "no ask head trained on this first stage: sentence reads stay off (`fleetchat safety sentence-reads`)"
        )
        return
    calibrate_sentence_reads(model_dir, splits, seed=seed, console=console)

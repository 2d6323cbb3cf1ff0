"""Train the classifier's second stage: fine-tune all-MiniLM-L6-v2 on the labelled set (P(harmful) + category),
export it to ONNX, quantise it to int8, and choose its thresholds on the validation split for the cascade as shipped.

Run: `fleetchat safety train` (after the first stage, on the same split). Writes intent.onnx, intent.json and
intent_metrics.json to functions/safety/model/; every number it reports is measured on the int8 model that ships."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, Field
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from functions.offline.safety_training.block_metrics import BlockMetrics, block_metrics, metrics_table
from functions.offline.safety_training.composed.benign_sentences import benign_sentences
from functions.offline.safety_training.composed.buried_requests import buried_windows
from functions.offline.safety_training.composed.long_chats import composed_long_chats
from functions.offline.safety_training.distill import minilm_dir
from functions.offline.safety_training.intent.intent_ensemble import file_version
from functions.offline.safety_training.intent.intent_fine_tune import (
    BATCH,
    TrainingRun,
    fine_tune_arrays,
    fine_tune_run,
    load_base,
    pad_rows,
    save_arrays,
)
from functions.offline.safety_training.labelled_data import (
    LabelledConversation,
    PublicExample,
    neutral_messages,
)
from functions.offline.safety_training.thresholds import (
    SECOND_STAGE_MAX_VALIDATION_FALSE_POSITIVE,
    choose_threshold,
    sensitive_benign_rows,
    source_capped_threshold,
)
from functions.safety.categories import CLASSIFIER_LABELS
from functions.safety.classifier.cascade import SafetyClassifier
from functions.safety.classifier.conversation_text import ConversationText
from functions.safety.classifier.head import ClassifierHead
from functions.safety.classifier.intent_model import INTENT, READS_OFF, IntentEncoder, IntentMeta, load_intent
from functions.safety.classifier.token_table import TokenTable

INTENT_METRICS_FILE = "intent_metrics.json"
# Requests longer than one first-stage window that it scores below `escalate_at` are let through unseen by this
# stage: it is the highest score that still sends this share of the validation split's long harmful examples on.
MIN_ESCALATED_RECALL = 0.99
# The second stage is the average of this many fine-tunes' weights (seeds seed, seed+1, ...: a "model soup"). One
# fine-tune's over-refusals move with its seed (the same data refused a coffee-stain question at 0.99 under one seed
# and not under another); the average costs training time only, not a pass at request time.
SOUP_SIZE = 3
# Each hand-written training conversation counts this many times in the second stage's epochs: they are the
# near-the-line cases (medical, security, fiction, multi-turn escalation) that the public sets have few of, and
# outnumbered by the public data they no longer held the golden gate (5.6 % of its benign items refused).
HAND_WRITTEN_REPEATS = 2
# A long benign training example also teaches this many of its first-stage windows as benign: at run time the second
# stage reads the worst window of a long text (a news article's paragraph about a shooting), not only its end.
BENIGN_WINDOWS_PER_EXAMPLE = 2


class IntentConfig(BaseModel):
    """The second stage's size: what one pass costs grows with layers x tokens."""

    layers: int = Field(default=6, ge=1, le=6)  # MiniLM's bottom layers kept (it has six)
    max_tokens: int = Field(default=128, gt=2)  # [CLS] + the span's last tokens + [SEP]
    epochs: int = Field(default=3, ge=1)
    soup: int = Field(default=SOUP_SIZE, ge=1)  # fine-tunes averaged into the shipped weights
    # Long chats composed from the training split (`long_chats.py`) whose windows holding the harmful request placed
    # in every HARMFUL_EVERY-th are learnt as harmful, and the most sensitive windows holding none of it as benign
    # (`buried_requests.py`). Off by default: candidates r9 and r10 are in docs/safety.md.
    buried_chats: int = Field(default=0, ge=0)
    # Public sources whose training examples count this many times in the second stage's epochs (the hand-written ones
    # count HAND_WRITTEN_REPEATS times whatever this says). Empty by default: the shipped model weighs every public
    # example once. Meant for benign contrast sets, against the over-refusal that more harmful sources bring
    # (docs/safety.md, the source sweep).
    repeats: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    # Sentences of each long benign training example learnt alone as benign (`benign_sentences.py`). Off by default.
    benign_sentences: int = Field(default=0, ge=0)
    # Calibration, not training: the most of each sensitive-but-safe source's (SENSITIVE_BENIGN) validation rows the
    # second stage may block, on top of the pooled SECOND_STAGE_MAX_VALIDATION_FALSE_POSITIVE, which the many easy
    # benign rows dominate. None (the shipped model): the pooled rule alone.
    source_cap: float | None = Field(default=None, gt=0.0, le=1.0)


class CascadeMetrics(BlockMetrics):
    escalated: float  # share of all examples that needed the second stage


class IntentReport(BaseModel):
    version: str
    threshold: float
    escalate_at: float
    config: IntentConfig
    sizes: dict[str, int]
    validation: CascadeMetrics
    test: CascadeMetrics
    # Share of each SENSITIVE_BENIGN source's validation rows blocked (the sources in the split).
    sensitive_blocked: dict[str, float] = Field(default_factory=dict)


def neutral_conversation(item: LabelledConversation) -> ConversationText:
    """What the gate judges of a labelled conversation (allow-listed idioms neutralised, as at run time)."""
    return neutral_messages(item.messages)


def fine_tune(
    encoder: IntentEncoder,
    texts: list[str],
    targets: np.ndarray,
    categories: np.ndarray,
    config: IntentConfig,
    seed: int,
    progress: Progress,
) -> object:
    """MiniLM's bottom `config.layers` layers tuned to P(harmful) = `targets` (a label or a teacher's probability)
    per text, with the category probe on `categories` (IGNORED: no category for that text), on the CPU."""
    ids, mask = pad_rows([encoder.ids(text) for text in texts], config.max_tokens)
    task = progress.add_task("fine-tuning MiniLM", total=config.epochs * ((len(texts) + BATCH - 1) // BATCH))
    return fine_tune_arrays(
        minilm_dir(),
        ids,
        mask,
        targets,
        categories,
        layers=config.layers,
        epochs=config.epochs,
        classes=len(CLASSIFIER_LABELS),
        seed=seed,
        on_step=lambda: progress.advance(task),
    )


def export_int8(net: object, encoder: IntentEncoder, out_dir: Path, name: str) -> str:
    """ONNX export to `name`.onnx, int8 dynamic quantisation; the shipped file's content hash (its version)."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    ids, mask = encoder.batch(["an example to trace the graph with"])
    seq = torch.export.Dim("seq", max=512)
    batch = torch.export.Dim("batch", max=256)
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "intent_fp32.onnx"
        torch.onnx.export(
            net,
            (torch.from_numpy(ids), torch.from_numpy(mask)),
            str(fp32),
            input_names=["input_ids", "attention_mask"],
            output_names=["harmful", "categories"],
            dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
            dynamo=True,
            external_data=False,
            verbose=False,
        )
        shipped = out_dir / f"{name}.onnx"
        quantize_dynamic(str(fp32), str(shipped), weight_type=QuantType.QInt8, per_channel=True)
    return file_version(shipped)


def _escalate_at(first_stage: np.ndarray, harmful: np.ndarray) -> float:
    """The highest first-stage score that still escalates MIN_ESCALATED_RECALL of the harmful examples: one of their
    scores (an interpolated quantile lies above the example at it, which it would then let through)."""
    return float(np.quantile(first_stage[harmful], 1.0 - MIN_ESCALATED_RECALL, method="lower"))


def _measure(read: np.ndarray, second: np.ndarray, labels: np.ndarray, threshold: float) -> CascadeMetrics:
    """The cascade's blocks: read by the second stage (`read`) and scored at `threshold` or more there."""
    blocked = read & (second >= threshold)
    return CascadeMetrics(**block_metrics(blocked, labels), escalated=float(read.mean()))


def benign_windows(
    fast: SafetyClassifier, conversations: list[ConversationText], labels: np.ndarray, seed: int
) -> list[str]:
    """Up to BENIGN_WINDOWS_PER_EXAMPLE first-stage windows (chosen at random) of each benign conversation longer
    than one window, as texts."""
    rng = np.random.default_rng(seed)
    windows = []
    for conversation, label in zip(conversations, labels, strict=True):
        if label != 0:
            continue
        spans = fast.features(conversation).spans[1:]
        if spans:
            picked = rng.choice(len(spans), size=min(BENIGN_WINDOWS_PER_EXAMPLE, len(spans)), replace=False)
            windows += [spans[i].text for i in sorted(picked)]
    return windows


def intent_training_examples(
    splits: tuple[list[LabelledConversation], list[LabelledConversation], list[LabelledConversation]],
    out_dir: Path,
    *,
    seed: int,
    config: IntentConfig,
) -> tuple[list[str], np.ndarray]:
    """What the second stage learns from `splits[0]`, in order: each conversation as the gate judges it (hand-written
    ones HAND_WRITTEN_REPEATS times, those of a source in `config.repeats` as often as it says), benign windows of
    long benign ones, buried-request windows, sentences of long benign ones; and label indices."""
    fast = SafetyClassifier(TokenTable.load(out_dir), ClassifierHead.load(out_dir), None)
    conversations = [neutral_conversation(item) for item in splits[0]]
    labels = np.asarray([CLASSIFIER_LABELS.index(item.label) for item in splits[0]], np.int64)
    windows = benign_windows(fast, conversations, labels, seed)
    sentences = []
    if config.benign_sentences:
        long = [len(fast.features(c).spans) > 1 for c in conversations]
        sentences = benign_sentences(conversations, labels, long, config.benign_sentences, seed)
    buried, buried_labels = buried_windows(fast, composed_long_chats(splits[0], config.buried_chats, seed + 1))
    hand_written = [i for i, item in enumerate(splits[0]) if not isinstance(item, PublicExample)]
    repeated = hand_written * (HAND_WRITTEN_REPEATS - 1) + [
        i
        for i, item in enumerate(splits[0])
        if isinstance(item, PublicExample)
        for _ in range(config.repeats.get(item.source, 1) - 1)
    ]
    texts = [c.whole for c in conversations] + [conversations[i].whole for i in repeated] + windows + buried
    texts += sentences
    targets = np.concatenate(
        [labels, labels[repeated], np.zeros(len(windows), np.int64), buried_labels, np.zeros(len(sentences), np.int64)]
    )
    return texts, targets


def intent_run_settings(config: IntentConfig, seed: int, sources: list[str]) -> dict[str, Any]:
    """What a second-stage training run is: weights made on a GPU must match the run that imports them."""
    return {
        "layers": config.layers,
        "max_tokens": config.max_tokens,
        "epochs": config.epochs,
        "soup": config.soup,
        "buried_chats": config.buried_chats,
        "seed": seed,
        "classes": len(CLASSIFIER_LABELS),
        "sources": sources,
        # Only when some source is repeated, so weights made before the option existed still match their run.
        **({"repeats": dict(sorted(config.repeats.items()))} if config.repeats else {}),
        **({"benign_sentences": config.benign_sentences} if config.benign_sentences else {}),
    }


def intent_training_run(
    texts: list[str], targets: np.ndarray, encoder: IntentEncoder, settings: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray, TrainingRun]:
    """(ids, mask, run) of the second stage's training examples, each distinct text tokenised once."""
    distinct = list(dict.fromkeys(texts))
    index = {text: i for i, text in enumerate(distinct)}
    ids, mask = pad_rows([encoder.ids(text) for text in distinct], settings["max_tokens"])
    rows = np.asarray([index[text] for text in texts], np.int32)
    run = TrainingRun(rows, (targets != 0).astype(np.float32), targets.astype(np.int32), settings)
    return ids, mask, run


# What an imported second stage was made from (its run's settings, and what it was interpolated with), written beside
# the exported model by `train --intent-weights`.
INTENT_WEIGHTS_FILE = "intent_weights.json"
# Keys a weights file may add to its run's settings: how the weights were made, not which run they are for.
PROVENANCE_KEYS = frozenset({"interpolated"})


def read_intent_weights(path: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The saved weights file, if it was made for exactly this run (else ValueError naming the settings that differ).
    A weights file may add PROVENANCE_KEYS to its run's settings."""
    import torch

    saved = torch.load(path, map_location="cpu", weights_only=True)
    made = saved["settings"]
    differing = sorted(k for k in (settings.keys() | made.keys()) - PROVENANCE_KEYS if made.get(k) != settings.get(k))
    if differing:
        raise ValueError(f"{path} was trained for another run (differs in: {', '.join(differing)})")
    return saved


def load_intent_weights(path: Path, settings: dict[str, Any]) -> tuple[object, dict[str, Any]]:
    """The second stage fine-tuned elsewhere (`intent_fine_tune.py`, `intent_soup.py`) for this run, and the settings
    it carries (the run's, and its provenance keys)."""
    from functions.offline.safety_training.intent.intent_net import IntentNet

    saved = read_intent_weights(path, settings)
    net = IntentNet(load_base(minilm_dir(), settings["layers"]), settings["classes"])
    net.load_state_dict(saved["state_dict"])
    return net.eval(), saved["settings"]


def train_intent(
    splits: tuple[list[LabelledConversation], list[LabelledConversation], list[LabelledConversation]],
    out_dir: Path,
    *,
    seed: int,
    console: Console,
    config: IntentConfig | None = None,
    sources: list[str] | None = None,
    weights: Path | None = None,
    export_to: Path | None = None,
) -> IntentReport | None:
    """Fine-tune on `splits[0]`, choose thresholds on `splits[1]`, report `splits[1]` and the held-out `splits[2]`.
    With `weights` (fine-tuned elsewhere for this very run: `sources` are the split's public sources) those weights
    are exported instead of fine-tuning here; with `export_to` the training arrays are written there and nothing is
    trained (None is returned)."""
    config = config or IntentConfig()
    settings = intent_run_settings(config, seed, sources or [])
    encoder = IntentEncoder.load(out_dir, config.max_tokens)
    if weights is not None and export_to is None:
        net, made = load_intent_weights(weights, settings)
        (out_dir / INTENT_WEIGHTS_FILE).write_text(json.dumps({"file": weights.name, **made}, indent=2) + "\n")
    else:
        # Each distinct text tokenised once, for every fine-tune of the soup and for the arrays file alike.
        texts, targets = intent_training_examples(splits, out_dir, seed=seed, config=config)
        ids, mask, run = intent_training_run(texts, targets, encoder, settings)
        if export_to is not None:
            save_arrays(export_to, ids, mask, {"main": run})
            console.print(f"wrote {len(run.rows)} training rows ({len(ids)} distinct texts) to {export_to}")
            return None
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("fine-tuning MiniLM", total=config.soup * config.epochs * -(-len(texts) // BATCH))
            net = fine_tune_run(ids, mask, run, minilm_dir(), "cpu", on_step=lambda: progress.advance(task))
    version = export_int8(net, encoder, out_dir, INTENT)
    placeholder = IntentMeta(
        labels=list(CLASSIFIER_LABELS), max_tokens=config.max_tokens, threshold=1.0, escalate_at=0.0, version=version
    )
    (out_dir / f"{INTENT}.json").write_text(placeholder.model_dump_json(indent=2) + "\n")
    report = calibrate_intent(out_dir, splits, config)
    console.print(_table(report))
    return report


def calibrate_intent(
    out_dir: Path,
    splits: tuple[list[LabelledConversation], list[LabelledConversation], list[LabelledConversation]],
    config: IntentConfig,
) -> IntentReport:
    """Choose the shipped second stage's `escalate_at` and block threshold on `splits[1]` (its benign examples blocked
    at most SECOND_STAGE_MAX_VALIDATION_FALSE_POSITIVE), rewrite intent.json and intent_metrics.json, and report
    `splits[1]` and the held-out `splits[2]`. Measured on the int8 model in `out_dir`, whose meta file it rewrites."""
    import torch

    meta_file = out_dir / f"{INTENT}.json"
    shipped = load_intent(out_dir, threads=torch.get_num_threads())
    cascade = SafetyClassifier(TokenTable.load(out_dir), ClassifierHead.load(out_dir), shipped)
    conversations = [[neutral_conversation(item) for item in part] for part in splits[1:]]
    labels = [np.asarray([CLASSIFIER_LABELS.index(item.label) for item in part], np.int64) for part in splits[1:]]
    fast = [cascade.fast(c) for c in conversations[0]]
    first = np.asarray([f.score for f in fast])
    # escalate_at decides only for conversations longer than one window (a short one is always read).
    long = ~np.asarray([f.short for f in fast])
    escalate_at = _escalate_at(first[long], labels[0][long] != 0)
    # What the second stage reads depends on escalate_at (the regions the first stage is unsure of, and every short
    # conversation); what it does not read scores 0.
    scores = [[cascade.intent_score(c, escalate_at) for c in part] for part in conversations]
    read = [np.asarray([score is not None for score in part]) for part in scores]
    second = [np.asarray([score or 0.0 for score in part]) for part in scores]
    sensitive = sensitive_rows(splits[1], labels[0])
    threshold = max(
        choose_threshold(second[0], labels[0], SECOND_STAGE_MAX_VALIDATION_FALSE_POSITIVE),
        source_capped_threshold(second[0], sensitive, config.source_cap),
    )
    # The turn and sentence reads' thresholds depend on this one and the screen's: chosen again after both
    # (`turn_reads.py`, `sentence_reads.py`).
    meta = shipped.meta.model_copy(update={"threshold": threshold, "escalate_at": escalate_at, **READS_OFF})
    meta_file.write_text(meta.model_dump_json(indent=2) + "\n")
    report = IntentReport(
        version=meta.version,
        threshold=threshold,
        escalate_at=escalate_at,
        config=config,
        sizes={name: len(part) for name, part in zip(("train", "validation", "test"), splits, strict=True)},
        validation=_measure(read[0], second[0], labels[0], threshold),
        test=_measure(read[1], second[1], labels[1], threshold),
        sensitive_blocked={source: float((second[0][rows] >= threshold).mean()) for source, rows in sensitive.items()},
    )
    (out_dir / INTENT_METRICS_FILE).write_text(json.dumps(report.model_dump(), indent=2) + "\n")
    return report


def sensitive_rows(items: list[LabelledConversation], labels: np.ndarray) -> dict[str, np.ndarray]:
    """Each SENSITIVE_BENIGN source's benign rows among `items` (a mask per source present)."""
    sources = np.asarray([item.source if isinstance(item, PublicExample) else "" for item in items])
    return sensitive_benign_rows(sources, labels == 0)


def _table(report: IntentReport) -> Table:
    return metrics_table(
        f"safety cascade (intent model {report.version}): escalate at {report.escalate_at:.3f}, "
        f"block at {report.threshold:.3f}",
        {"validation": report.validation, "test (held out)": report.test},
        ("escalated", lambda m: m.escalated),
    )

"""Train the output check (`output_classifier.py`) on model answers from public sources: MiniLM's bottom layers
fine-tuned on the windows the stream guard reads as an answer streams (at most MAX_WINDOWS_PER_ANSWER of each),
each labelled by its answer; the threshold is the lowest that halts at most MAX_HALTED_BENIGN of the validation
split's benign answers; measured per answer (halted when any window crosses) on the held-out answer sources.

Run: `fleetchat safety train-output` (after the request stages; their tokenizer is reused)."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
from pydantic import BaseModel
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from functions.offline.safety_training.intent.train_intent import IntentConfig, export_int8, fine_tune
from functions.offline.safety_training.labelled_data import PublicExample, public_examples
from functions.offline.safety_training.sources.public_sources import SOURCES, Kind, Use
from functions.offline.safety_training.thresholds import choose_threshold
from functions.safety.categories import BENIGN, CLASSIFIER_LABELS
from functions.safety.classifier.intent_model import IntentEncoder
from functions.safety.classifier.output_classifier import OUTPUT, OutputClassifier, OutputMeta
from functions.safety.classifier.token_table import MODEL_DIR
from functions.safety.stream_guard import output_windows

OUTPUT_METRICS_FILE = "output_metrics.json"
OUTPUT_CONFIG = IntentConfig(layers=2, max_tokens=96, epochs=2, soup=1)  # a 400-character window is ~95 tokens
SEED = 11
VALIDATION_PERCENT = 20
MAX_HALTED_BENIGN = 0.01  # of the validation split's benign answers
# A long answer teaches at most this many of its windows (evenly spread): without a cap, a few long ordinary answers
# would be most of the training set.
MAX_WINDOWS_PER_ANSWER = 6


class AnswerMetrics(BaseModel):
    answers: int
    harmful: int
    halted_harmful: float  # recall
    halted_benign: float  # false-positive rate
    precision: float


class SourceAnswers(BaseModel):
    source: str
    answers: int
    harmful: int
    halted: int


class OutputReport(BaseModel):
    version: str
    threshold: float
    windows: int
    validation: AnswerMetrics
    held_out: list[SourceAnswers]
    held_out_total: AnswerMetrics


def _answer(example: PublicExample) -> str:
    return "\n".join(m.content for m in example.messages)


def _split(examples: list[PublicExample]) -> tuple[list[PublicExample], list[PublicExample]]:
    train, validation = [], []
    for example in examples:
        bucket = int.from_bytes(hashlib.sha256(example.key().encode()).digest()[:8], "big") % 100
        (validation if bucket < VALIDATION_PERCENT else train).append(example)
    return train, validation


def _sources(use: Use) -> list[str]:
    return [s.name for s in SOURCES if s.kind is Kind.RESPONSE and s.use is use]


def answer_scores(classifier: OutputClassifier, examples: list[PublicExample]) -> np.ndarray:
    """Each answer's worst window score, as the stream guard would meet it (0 for one too short to be read)."""
    windows = [output_windows(_answer(e)) for e in examples]
    scores = np.asarray(classifier.scores([w for ws in windows for w in ws]))
    bounds = np.cumsum([0] + [len(ws) for ws in windows])
    return np.asarray([scores[a:b].max(initial=0.0) for a, b in itertools.pairwise(bounds)])


def training_windows(examples: list[PublicExample]) -> list[tuple[str, str]]:
    """(window, its answer's label): up to MAX_WINDOWS_PER_ANSWER evenly spread windows of each answer."""
    pairs = []
    for example in examples:
        windows = output_windows(_answer(example), short=True)
        if len(windows) > MAX_WINDOWS_PER_ANSWER:
            picked = np.linspace(0, len(windows) - 1, MAX_WINDOWS_PER_ANSWER).round().astype(int)
            windows = [windows[i] for i in picked]
        pairs += [(window, example.label) for window in windows]
    return pairs


def _metrics(halted: np.ndarray, harmful: np.ndarray) -> AnswerMetrics:
    caught = int((halted & harmful).sum())
    return AnswerMetrics(
        answers=len(harmful),
        harmful=int(harmful.sum()),
        halted_harmful=caught / max(int(harmful.sum()), 1),
        halted_benign=int((halted & ~harmful).sum()) / max(int((~harmful).sum()), 1),
        precision=caught / max(int(halted.sum()), 1),
    )


def train_output(out_dir: Path = MODEL_DIR, console: Console | None = None, seed: int = SEED) -> OutputReport:
    console = console or Console()
    examples = [e for name in _sources(Use.TRAIN) for e in public_examples(name)]
    train, _ = _split(examples)
    windows = training_windows(train)
    encoder = IntentEncoder.load(out_dir, OUTPUT_CONFIG.max_tokens)
    labels = np.asarray([CLASSIFIER_LABELS.index(label) for _, label in windows], np.int64)
    with Progress(console=console, transient=True) as progress:
        net = fine_tune(
            encoder,
            [w for w, _ in windows],
            (labels != 0).astype(np.float32),
            labels,
            OUTPUT_CONFIG,
            seed,
            progress,
        )
        version = export_int8(net, encoder, out_dir, OUTPUT)
    meta = OutputMeta(
        labels=list(CLASSIFIER_LABELS), max_tokens=OUTPUT_CONFIG.max_tokens, threshold=1.0, version=version
    )
    (out_dir / f"{OUTPUT}.json").write_text(meta.model_dump_json(indent=2) + "\n")
    return calibrate_output(out_dir, console, windows=len(windows))


def calibrate_output(out_dir: Path, console: Console, windows: int | None = None) -> OutputReport:
    """Choose the shipped output check's threshold on the validation split's answers and measure it on the held-out
    answer sources; writes output.json and output_metrics.json (`windows`: how many it was trained on, None: as
    recorded)."""
    import torch

    if windows is None:
        windows = OutputReport.model_validate_json((out_dir / OUTPUT_METRICS_FILE).read_text()).windows

    shipped = OutputClassifier.load(out_dir, threads=torch.get_num_threads())  # measure what ships (int8)
    assert shipped is not None
    _, validation = _split([e for name in _sources(Use.TRAIN) for e in public_examples(name)])
    harmful = np.asarray([e.label != BENIGN for e in validation])
    scores = answer_scores(shipped, validation)
    threshold = choose_threshold(scores, harmful.astype(int), MAX_HALTED_BENIGN, ceiling=0.99999, margin=1e-5)
    meta = shipped.meta.model_copy(update={"threshold": threshold})
    (out_dir / f"{OUTPUT}.json").write_text(meta.model_dump_json(indent=2) + "\n")
    held_out, all_halted, all_harmful = [], [], []
    for name in _sources(Use.HELD_OUT):
        answers = public_examples(name)
        halted = answer_scores(shipped, answers) >= threshold
        is_harmful = np.asarray([e.label != BENIGN for e in answers])
        held_out.append(
            SourceAnswers(source=name, answers=len(answers), harmful=int(is_harmful.sum()), halted=int(halted.sum()))
        )
        all_halted.append(halted)
        all_harmful.append(is_harmful)
    report = OutputReport(
        version=meta.version,
        threshold=threshold,
        windows=windows,
        validation=_metrics(scores >= threshold, harmful),
        held_out=held_out,
        held_out_total=_metrics(np.concatenate(all_halted), np.concatenate(all_harmful)),
    )
    (out_dir / OUTPUT_METRICS_FILE).write_text(json.dumps(report.model_dump(), indent=2) + "\n")
    console.print(_table(report))
    return report


def _table(report: OutputReport) -> Table:
    table = Table(title=f"output check {report.version}: halt at {report.threshold:.3f} ({report.windows} windows)")
    for column in ("answers", "count", "harmful", "halted"):
        table.add_column(column, justify="left" if column == "answers" else "right")
    for source in report.held_out:
        table.add_row(f"{source.source} (held out)", str(source.answers), str(source.harmful), str(source.halted))
    for name, m in (("validation split", report.validation), ("held out, all", report.held_out_total)):
        table.add_row(
            name,
            str(m.answers),
            str(m.harmful),
            f"harmful {m.halted_harmful:.1%}, benign {m.halted_benign:.1%}, precision {m.precision:.1%}",
        )
    return table


if __name__ == "__main__":
    train_output()

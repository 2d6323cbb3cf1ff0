"""The classifier's transformer stages: all-MiniLM-L6-v2 fine-tuned on the labelled set (its bottom layers, on a
span's last tokens), int8, run by ONNX Runtime. Two ship: the screen (2 layers, 64 tokens) and the second stage
(6 layers, 128 tokens).

They read a span in context (word order, negation, who asks for what), which the first stage's bag of token vectors
cannot; each costs a transformer pass, so they only run on what the first stage finds uncertain (`classifier.py`)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np
from pydantic import BaseModel, Field
from tokenizers import Tokenizer

from functions.safety.classifier.token_table import MODEL_DIR, TOKENIZER_FILE

INTENT = "intent"  # the second stage: intent.onnx + intent.json
SCREEN = "screen"  # the screen: screen.onnx + screen.json
PASS_THREADS = 2  # the most cores one transformer pass uses


class SpanModelMeta(BaseModel):
    labels: list[str]  # the category output's order; labels[0] is "benign"
    max_tokens: int = Field(gt=2)  # [CLS] + the span's last tokens + [SEP]
    version: str  # content hash of the exported model (of every member's, for an ensemble)
    # Further exported fine-tunes in the same directory (`NAME.onnx` for each NAME) whose outputs are averaged with
    # this file's: an ensemble of independently trained models reading the same span (`training/intent_ensemble.py`).
    # Empty: this model alone.
    members: list[str] = Field(default_factory=list)


class IntentMeta(SpanModelMeta):
    threshold: float = Field(ge=0.0, le=1.0)  # block when P(harmful) >= threshold
    # The first stage's score from which a request is worth this stage's pass (below it: let through).
    escalate_at: float = Field(ge=0.0, le=1.0)
    # Turn reads (`SafetyClassifier.turn_verdict`): each judged turn of a conversation of two or more that the first
    # stage, reading it alone, scores `turn_escalate_at` or more is read alone by this stage too, and blocks the
    # conversation at `turn_block_at` (stricter than `threshold`: a long chat has many turns). None: no turn reads
    # (a model calibrated before 2026-11-29, or not yet calibrated for them: `training/turn_reads.py`).
    turn_escalate_at: float | None = Field(default=None, ge=0.0, le=1.0)
    turn_block_at: float | None = Field(default=None, ge=0.0, le=1.0)
    # Sentence reads (`SafetyClassifier.sentence_verdict`): each sentence of a turn longer than one first-stage window
    # that the ask head scores `sentence_ask_at` or more (phrased as a request) and the first stage
    # `sentence_escalate_at` or more is read alone by this stage too, and blocks the conversation at
    # `sentence_block_at`. None: no sentence reads (not calibrated for them: `training/sentence_reads.py`).
    sentence_ask_at: float | None = Field(default=None, ge=0.0, le=1.0)
    sentence_escalate_at: float | None = Field(default=None, ge=0.0, le=1.0)
    sentence_block_at: float | None = Field(default=None, ge=0.0, le=1.0)


# The IntentMeta fields of the turn and sentence reads, unset: what a recalibrated second stage starts from.
READS_OFF: dict[str, None] = {
    "turn_escalate_at": None,
    "turn_block_at": None,
    "sentence_ask_at": None,
    "sentence_escalate_at": None,
    "sentence_block_at": None,
}


class ScreenMeta(SpanModelMeta):
    # A span the screen scores below this is let through; the second stage reads the rest.
    clear_below: float = Field(ge=0.0, le=1.0)


MetaT = TypeVar("MetaT", bound=SpanModelMeta)


class IntentVerdict(BaseModel):
    score: float  # P(harmful)
    category: str  # the most likely harmful category
    # The category head's whole distribution, label -> probability (benign included; sums to 1). Informational: what
    # `/v1/moderations` reports as category scores; blocking reads `score` only.
    distribution: dict[str, float] | None = None


class IntentEncoder:
    """Text -> [CLS] + its last (max_tokens - 2) MiniLM tokens + [SEP]: the end of a conversation is what it asks."""

    def __init__(self, tokenizer: Tokenizer, max_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.cls = tokenizer.token_to_id("[CLS]")
        self.sep = tokenizer.token_to_id("[SEP]")

    @classmethod
    def load(cls, directory: Path, max_tokens: int) -> IntentEncoder:
        tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_FILE))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return cls(tokenizer, max_tokens)

    @property
    def body_tokens(self) -> int:
        """How many of a span's last tokens are read."""
        return self.max_tokens - 2

    def ids(self, text: str) -> list[int]:
        return self.wrap(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def wrap(self, tokens: Sequence[int]) -> list[int]:
        """[CLS] + the last body_tokens of `tokens` + [SEP]."""
        return [self.cls, *np.asarray(tokens[-self.body_tokens :]).tolist(), self.sep]

    def batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask), right-padded with 0 to the longest."""
        return pad([self.ids(t) for t in texts])


def pad(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask) of token rows, right-padded with 0 to the longest."""
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


class SpanModel(Generic[MetaT]):
    """One exported transformer stage: spans -> P(harmful) and the most likely category. An ensemble's sessions all
    read each span; their P(harmful) and category distributions are averaged."""

    def __init__(self, session: object, encoder: IntentEncoder, meta: MetaT, members: Sequence[object] = ()) -> None:
        self.session = session
        self.members = list(members)  # the ensemble's further sessions (meta.members, in order)
        self.encoder = encoder
        self.meta = meta

    @classmethod
    def load(
        cls, meta_type: type[MetaT], name: str, directory: Path = MODEL_DIR, *, threads: int | None = None
    ) -> SpanModel[MetaT]:
        import onnxruntime as ort

        meta = meta_type.model_validate(json.loads((directory / f"{name}.json").read_text()))
        options = ort.SessionOptions()
        # One pass uses up to two cores (about 1.7x faster than one, measured here); its threads sleep rather than
        # spin between passes, so concurrent checks and a CPU engine on the same machine keep their cores.
        options.intra_op_num_threads = threads or min(PASS_THREADS, os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        sessions = [
            ort.InferenceSession(str(directory / f"{file}.onnx"), options, providers=["CPUExecutionProvider"])
            for file in (name, *meta.members)
        ]
        return cls(sessions[0], IntentEncoder.load(directory, meta.max_tokens), meta, sessions[1:])

    def judge(self, texts: list[str]) -> list[IntentVerdict]:
        """One verdict per text."""
        return self._judge([self.encoder.ids(t) for t in texts])

    def judge_tokens(self, spans: list[np.ndarray]) -> list[IntentVerdict]:
        """One verdict per span of MiniLM token ids (as the first stage tokenized them)."""
        return self._judge([self.encoder.wrap(ids) for ids in spans])

    def _judge(self, rows: list[list[int]]) -> list[IntentVerdict]:
        """Spans of different lengths run as separate passes (padding a short one to a long one costs a pass)."""
        by_length: dict[int, list[int]] = {}
        for i, row in enumerate(rows):
            by_length.setdefault(len(row), []).append(i)
        verdicts: list[IntentVerdict | None] = [None] * len(rows)
        for same_length in by_length.values():
            harmful, categories = self._run(*pad([rows[i] for i in same_length]))
            worst = categories[:, 1:].argmax(axis=1) + 1
            for i, h, c, dist in zip(same_length, harmful, worst, categories, strict=True):
                label = self.meta.labels[int(c)]
                distribution = {name: float(p) for name, p in zip(self.meta.labels, dist, strict=True)}
                verdicts[i] = IntentVerdict(score=float(h), category=label, distribution=distribution)
        return [v for v in verdicts if v is not None]

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(P(harmful), category distribution) per row, averaged over the ensemble's sessions."""
        outputs = [
            session.run(None, {"input_ids": ids, "attention_mask": mask})  # type: ignore[attr-defined]
            for session in (self.session, *self.members)
        ]
        return np.mean([o[0] for o in outputs], axis=0), np.mean([o[1] for o in outputs], axis=0)


IntentModel = SpanModel[IntentMeta]
ScreenModel = SpanModel[ScreenMeta]


def load_intent(directory: Path = MODEL_DIR, *, threads: int | None = None) -> IntentModel:
    return SpanModel.load(IntentMeta, INTENT, directory, threads=threads)


def load_screen(directory: Path = MODEL_DIR, *, threads: int | None = None) -> ScreenModel | None:
    """The screen, or None where none was trained (the second stage then reads everything escalated)."""
    if not (directory / f"{SCREEN}.onnx").exists():
        return None
    return SpanModel.load(ScreenMeta, SCREEN, directory, threads=threads)

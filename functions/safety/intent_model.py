"""The classifier's second stage: all-MiniLM-L6-v2 fine-tuned on the labelled set, int8, run by ONNX Runtime.

It reads a span in context (word order, negation, who asks for what), which the first stage's bag of token vectors
cannot; it costs a transformer pass, so it only runs on what the first stage finds uncertain (`classifier.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field
from tokenizers import Tokenizer

from functions.safety.token_table import MODEL_DIR, TOKENIZER_FILE

INTENT_FILE = "intent.onnx"
INTENT_META_FILE = "intent.json"


class IntentMeta(BaseModel):
    labels: list[str]  # the category output's order; labels[0] is "benign"
    max_tokens: int = Field(gt=2)  # [CLS] + the span's last tokens + [SEP]
    threshold: float = Field(ge=0.0, le=1.0)  # block when P(harmful) >= threshold
    # The first stage's score from which a request is worth this stage's pass (below it: let through).
    escalate_at: float = Field(ge=0.0, le=1.0)
    version: str  # content hash of the exported model


class IntentVerdict(BaseModel):
    score: float  # P(harmful)
    category: str  # the most likely harmful category


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
        body = self.tokenizer.encode(text, add_special_tokens=False).ids[-self.body_tokens :]
        return [self.cls, *body, self.sep]

    def batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask), right-padded with 0 to the longest."""
        rows = [self.ids(t) for t in texts]
        width = max(len(r) for r in rows)
        ids = np.zeros((len(rows), width), np.int64)
        mask = np.zeros((len(rows), width), np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        return ids, mask


class IntentModel:
    def __init__(self, session: object, encoder: IntentEncoder, meta: IntentMeta) -> None:
        self.session = session
        self.encoder = encoder
        self.meta = meta

    @classmethod
    def load(cls, directory: Path = MODEL_DIR, *, threads: int = 1) -> IntentModel:
        import onnxruntime as ort

        meta = IntentMeta.model_validate(json.loads((directory / INTENT_META_FILE).read_text()))
        options = ort.SessionOptions()
        # The gateway runs one check per worker thread; one core per pass keeps concurrent checks from thrashing.
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        session = ort.InferenceSession(str(directory / INTENT_FILE), options, providers=["CPUExecutionProvider"])
        return cls(session, IntentEncoder.load(directory, meta.max_tokens), meta)

    def judge(self, texts: list[str]) -> list[IntentVerdict]:
        """One verdict per span."""
        ids, mask = self.encoder.batch(texts)
        harmful, categories = self.session.run(None, {"input_ids": ids, "attention_mask": mask})  # type: ignore[attr-defined]
        worst = categories[:, 1:].argmax(axis=1) + 1
        labels = self.meta.labels
        return [IntentVerdict(score=float(h), category=labels[int(c)]) for h, c in zip(harmful, worst, strict=True)]

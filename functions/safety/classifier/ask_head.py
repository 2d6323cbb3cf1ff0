"""The ask head: whether a sentence, read alone, is a request addressed to the assistant or a sentence of a text.

Sentence reads (`SafetyClassifier.sentence_verdict`) look for a request inside one long turn. Read alone, a sentence of
a news story or a film plot about a crime looks to the second stage like the harmful asks it learnt (10 % of the
validation split's long benign texts have one it scores 0.975 or more), so a sentence is only read if it is also
phrased as an ask: "Explain how to pick a lock." is, "The burglar picked the lock." is not. A logistic scorer over the
first stage's features of the sentence (the same dense vectors and hashed n-grams, so it costs a dot product), trained
by `training/sentence_reads.py` on the training split's short asks against the sentences of its long benign texts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from functions.safety.classifier.features import Features
from functions.safety.classifier.head import linear_probability

ASK_HEAD_FILE = "ask_head.npz"


class AskHeadMeta(BaseModel):
    version: str  # content hash of the weights
    first_stage: str  # the first stage's version whose features (token table, n-gram idf) it was trained on


@dataclass
class AskHead:
    dense_weights: np.ndarray
    sparse_weights: np.ndarray
    bias: float
    meta: AskHeadMeta

    def ask_probability(self, features: Features) -> np.ndarray:
        """P(the row is a request rather than a sentence of a text), per row."""
        return linear_probability(features, self.dense_weights, self.sparse_weights, self.bias)

    def save(self, directory: Path) -> None:
        np.savez_compressed(
            directory / ASK_HEAD_FILE,
            dense_weights=self.dense_weights.astype(np.float32),
            sparse_weights=self.sparse_weights.astype(np.float16),
            bias=np.asarray(self.bias),
            meta=np.asarray(self.meta.model_dump_json()),
        )

    @classmethod
    def load(cls, directory: Path) -> AskHead:
        with np.load(directory / ASK_HEAD_FILE) as data:
            meta = AskHeadMeta.model_validate(json.loads(str(data["meta"])))
            return cls(
                data["dense_weights"].astype(np.float32),
                data["sparse_weights"].astype(np.float32),
                float(data["bias"]),
                meta,
            )


def load_ask_head(directory: Path, first_stage: str) -> AskHead | None:
    """The ask head in `directory` if it was trained on this first stage's features (None: absent, or stale after the
    first stage was retrained, so sentence reads are off until `fleetchat safety sentence-reads` trains it again)."""
    if not (directory / ASK_HEAD_FILE).exists():
        return None
    head = AskHead.load(directory)
    return head if head.meta.first_stage == first_stage else None

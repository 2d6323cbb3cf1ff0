"""The classifier head, evaluated with numpy: a linear scorer over dense embeddings + hashed n-grams decides
whether to block (probability the conversation is harmful); a one-hidden-layer MLP over the dense embeddings
names the category."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from functions.safety.classifier.features import Features

HEAD_FILE = "head.npz"


class HeadMeta(BaseModel):
    labels: list[str]  # the category MLP's output order; labels[0] is "benign"
    threshold: float = Field(ge=0.0, le=1.0)  # block when the scorer's probability >= threshold
    version: str  # content hash of the trained weights, part of the policy version


def linear_probability(
    features: Features, dense_weights: np.ndarray, sparse_weights: np.ndarray, bias: float
) -> np.ndarray:
    """A logistic scorer over [dense, sparse n-grams], per row."""
    logits = features.dense @ dense_weights + bias
    logits += np.asarray([float(sparse_weights[i] @ v) for i, v in features.sparse])
    return 1.0 / (1.0 + np.exp(-logits))


@dataclass
class ClassifierHead:
    # Category MLP over the dense features.
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    # Linear harmful-vs-benign scorer over [dense, sparse n-grams], and the n-grams' idf.
    dense_weights: np.ndarray
    sparse_weights: np.ndarray
    bias: float
    idf: np.ndarray
    meta: HeadMeta

    def harmful_probability(self, features: Features) -> np.ndarray:
        """P(harmful) per row."""
        return linear_probability(features, self.dense_weights, self.sparse_weights, self.bias)

    def category_probabilities(self, dense: np.ndarray) -> np.ndarray:
        """Softmax over meta.labels per row."""
        hidden = np.maximum(dense @ self.w1 + self.b1, 0.0)
        logits = hidden @ self.w2 + self.b2
        logits -= logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return exp / exp.sum(axis=1, keepdims=True)

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "w1": self.w1,
            "b1": self.b1,
            "w2": self.w2,
            "b2": self.b2,
            "dense_weights": self.dense_weights,
            "sparse_weights": self.sparse_weights.astype(np.float16),
            "bias": np.asarray(self.bias),
            "idf": self.idf.astype(np.float16),
        }

    def save(self, directory: Path) -> None:
        np.savez_compressed(directory / HEAD_FILE, **self.arrays(), meta=np.asarray(self.meta.model_dump_json()))

    @classmethod
    def load(cls, directory: Path) -> ClassifierHead:
        with np.load(directory / HEAD_FILE) as data:
            arrays = {name: data[name].astype(np.float32) for name in data.files if name != "meta"}
            meta = HeadMeta.model_validate(json.loads(str(data["meta"])))
        bias = float(arrays.pop("bias"))
        return cls(**arrays, bias=bias, meta=meta)

"""How well a classifier stage's block decisions fit the labels of a split, and the table training prints of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
from pydantic import BaseModel
from rich.table import Table

from functions.safety.categories import CLASSIFIER_LABELS


class BlockedCount(BaseModel):
    """How many of a group of items were blocked."""

    items: int
    blocked: int

    @property
    def rate(self) -> float:
        return self.blocked / self.items if self.items else 0.0


class BlockMetrics(BaseModel):
    examples: int
    harmful: int
    benign: int
    precision: float  # of "block", harmful vs benign
    recall: float
    false_positive_rate: float  # benign blocked
    recall_by_category: dict[str, float]


def block_metrics(blocked: np.ndarray, labels: np.ndarray) -> dict[str, object]:
    """BlockMetrics' fields for these block decisions (labels: CLASSIFIER_LABELS indices, 0 = benign)."""
    harmful = labels != 0
    caught = blocked & harmful
    return {
        "examples": int(labels.size),
        "harmful": int(harmful.sum()),
        "benign": int((~harmful).sum()),
        "precision": float(caught.sum() / max(blocked.sum(), 1)),
        "recall": float(caught.sum() / max(harmful.sum(), 1)),
        "false_positive_rate": float((blocked & ~harmful).sum() / max((~harmful).sum(), 1)),
        "recall_by_category": {
            CLASSIFIER_LABELS[c]: float(blocked[labels == c].mean())
            for c in range(1, len(CLASSIFIER_LABELS))
            if (labels == c).any()
        },
    }


M = TypeVar("M", bound="BlockMetrics")


def metrics_table(title: str, splits: dict[str, M], *extra: tuple[str, Callable[[M], float]]) -> Table:
    """One row per split: n, precision, recall, benign blocked and the stage-specific rates in `extra`."""
    table = Table(title=title)
    table.add_column("split")
    for column in ("n", "precision", "recall", "benign blocked", *(heading for heading, _ in extra)):
        table.add_column(column, justify="right")
    for name, m in splits.items():
        rates = (m.precision, m.recall, m.false_positive_rate, *(value(m) for _, value in extra))
        table.add_row(name, str(m.examples), *(f"{rate:.1%}" for rate in rates))
    return table

"""Rolling judge scores per pool (the last N verdicts), the reference-minus-candidate delta, and the alert decision:
the delta crosses its threshold only once both pools hold enough scores for the means to mean something."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from functions.judging.rubric import SCORE_NAMES
from functions.judging.verdict import JudgeScores

CRITERIA: tuple[str, ...] = ("overall", *SCORE_NAMES)


@dataclass(frozen=True)
class DeltaStatus:
    delta: float  # reference mean minus candidate mean (overall score); NaN until both pools have a score
    candidate_n: int
    reference_n: int
    alert: bool  # delta > threshold with at least min_samples in each pool


@dataclass
class RollingScores:
    candidate: str  # the pool being watched ("mini")
    reference: str  # the pool it is compared with ("flagship")
    window: int
    threshold: float
    min_samples: int
    _scores: dict[str, deque[JudgeScores]] = field(default_factory=dict)

    def add(self, pool: str, scores: JudgeScores) -> None:
        self._scores.setdefault(pool, deque(maxlen=self.window)).append(scores)

    def count(self, pool: str) -> int:
        return len(self._scores.get(pool, ()))

    def means(self, pool: str) -> dict[str, float]:
        """Mean of each criterion and overall over the pool's window; NaN when it has no score yet."""
        scores = self._scores.get(pool)
        if not scores:
            return dict.fromkeys(CRITERIA, math.nan)
        n = len(scores)
        means = {name: sum(getattr(s, name) for s in scores) / n for name in SCORE_NAMES}
        means["overall"] = sum(s.overall for s in scores) / n
        return means

    def status(self) -> DeltaStatus:
        candidate_n, reference_n = self.count(self.candidate), self.count(self.reference)
        delta = self.means(self.reference)["overall"] - self.means(self.candidate)["overall"]
        enough = min(candidate_n, reference_n) >= self.min_samples
        return DeltaStatus(delta, candidate_n, reference_n, alert=enough and delta > self.threshold)

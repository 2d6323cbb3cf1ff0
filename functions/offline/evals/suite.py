"""The suite contract: what a suite returns (metrics, cases) and how it reports progress."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from functions.offline.evals.target import EvalTarget


class Direction(StrEnum):
    HIGHER_IS_BETTER = "higher"
    LOWER_IS_BETTER = "lower"


class Metric(BaseModel):
    """One number a suite measured, with how it is gated."""

    name: str  # dotted, suite first: "quality.overall", "latency.mini.ttft_p95_s"
    value: float
    unit: str = ""  # "ratio", "s", "score", "count"
    direction: Direction
    # Allowed worsening vs the baseline of the same model version (absolute); None: not gated vs the baseline.
    tolerance: float | None = Field(default=None, ge=0)
    # Absolute bound: a minimum if higher is better, a maximum otherwise; None: none.
    threshold: float | None = None
    n: int | None = None  # sample size behind the value
    note: str = ""

    def breaks_threshold(self) -> bool:
        if self.threshold is None:
            return False
        if self.direction is Direction.HIGHER_IS_BETTER:
            return self.value < self.threshold
        return self.value > self.threshold

    def worsening(self, baseline: float) -> float:
        """How much worse than `baseline` this value is (negative: better)."""
        if self.direction is Direction.HIGHER_IS_BETTER:
            return baseline - self.value
        return self.value - baseline


class CaseResult(BaseModel):
    case_id: str
    passed: bool | None = None  # None: scored, not pass/fail
    score: float | None = None
    detail: dict[str, Any] = Field(default_factory=dict)  # small, JSON-able; no secrets


class SuiteResult(BaseModel):
    suite: str
    metrics: list[Metric] = Field(default_factory=list)
    cases: list[CaseResult] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # shown in the report
    error: str | None = None  # the suite could not run (counts as a failure)
    duration_s: float = 0.0


class Progress(Protocol):
    def start(self, suite: str, total: int) -> None: ...

    def advance(self, suite: str, step: int = 1) -> None: ...


class NullProgress:
    """Progress that shows nothing (tests, the scheduled job)."""

    def start(self, suite: str, total: int) -> None:
        return None

    def advance(self, suite: str, step: int = 1) -> None:
        return None


class Suite(Protocol):
    name: str  # "deploy", "quality", "multi_turn", "refusal", "latency"
    description: str

    async def run(self, target: EvalTarget, progress: Progress) -> SuiteResult: ...

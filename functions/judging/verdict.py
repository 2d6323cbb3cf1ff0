"""The judge's wire models: what is graded (`JudgeRequest`), the three 1-5 scores, and the verdict of one call."""

from __future__ import annotations

from pydantic import BaseModel, Field


class JudgeRequest(BaseModel):
    question: str  # the user's ask (last user turn, or a rendered short conversation)
    answer: str  # the assistant answer being graded
    reference: str | None = None  # a reference answer, when the item has one
    category: str | None = None  # coding / writing / qa / reasoning / ...


class JudgeScores(BaseModel):
    helpfulness: int = Field(ge=1, le=5)
    accuracy: int = Field(ge=1, le=5)
    format: int = Field(ge=1, le=5)

    @property
    def overall(self) -> float:
        """The mean of the three scores (1.0-5.0)."""
        return (self.helpfulness + self.accuracy + self.format) / 3


class JudgeVerdict(BaseModel):
    scores: JudgeScores | None  # None when the judge's reply could not be parsed or the call failed
    raw: str  # the judge's reply text ("" on a failed call)
    error: str | None = None  # why scores is None
    judge_model: str
    latency_s: float

    @property
    def ok(self) -> bool:
        return self.scores is not None

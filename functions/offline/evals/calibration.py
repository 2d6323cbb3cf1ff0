"""Judge calibration: the judge grades both answers of each human-labelled pair (MT-Bench's expert judgments, see
golden/data/sources.json for who labelled them and when), and its preference is compared with the humans'.

Pairwise agreement: a pair counts 1 when the judge's overall score is higher for the answer the experts preferred,
0 when it is higher for the other, 0.5 on a tie; a pair where either grade failed is left out (and counted). A
random judge scores about 0.5; GPT-4 agreed with these experts on about 66 % of MT-Bench pairs, ties included
(Zheng et al. 2023). Below `AGREEMENT_THRESHOLD`, or more than `AGREEMENT_TOLERANCE` below the baseline, the judge
has drifted: its grades should not be trusted until it is looked at."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import BaseModel

from functions.judging.client import JudgeClient
from functions.judging.verdict import JudgeRequest, JudgeVerdict
from functions.offline.evals.asking import bounded
from functions.offline.evals.golden.items import CalibrationItem
from functions.offline.evals.suite import CaseResult, Direction, Metric

AGREEMENT_THRESHOLD = 0.6
AGREEMENT_TOLERANCE = 0.1


class PairGrade(BaseModel):
    item: CalibrationItem
    overall_1: float | None
    overall_2: float | None
    error: str | None = None

    @property
    def judge_label(self) -> int | None:
        """1 or 2: the answer the judge graded higher; 0: a tie; None: a grade failed."""
        if self.overall_1 is None or self.overall_2 is None:
            return None
        if self.overall_1 == self.overall_2:
            return 0
        return 1 if self.overall_1 > self.overall_2 else 2

    @property
    def agreement(self) -> float | None:
        label = self.judge_label
        if label is None:
            return None
        return 0.5 if label == 0 else float(label == self.item.human_label)


def balanced(items: Sequence[CalibrationItem], limit: int | None) -> list[CalibrationItem]:
    """At most `limit` pairs, alternating the human label so a subset stays balanced."""
    if limit is None or limit >= len(items):
        return list(items)
    firsts = [i for i in items if i.human_label == 1]
    seconds = [i for i in items if i.human_label == 2]
    chosen: list[CalibrationItem] = []
    for a, b in zip(firsts, seconds, strict=False):
        chosen += [a, b]
    chosen += firsts[len(seconds) :] + seconds[len(firsts) :]
    return chosen[:limit]


async def grade_pairs(
    judge: JudgeClient,
    items: Sequence[CalibrationItem],
    *,
    concurrency: int,
    on_done: Callable[[], None] | None = None,
) -> list[PairGrade]:
    async def grade(item: CalibrationItem) -> PairGrade:
        verdicts: list[JudgeVerdict] = []
        for answer in (item.answer_1, item.answer_2):
            verdicts.append(await judge.judge(JudgeRequest(question=item.question, answer=answer)))
        errors = [v.error for v in verdicts if v.scores is None]
        return PairGrade(
            item=item,
            overall_1=verdicts[0].scores.overall if verdicts[0].scores else None,
            overall_2=verdicts[1].scores.overall if verdicts[1].scores else None,
            error=errors[0] if errors else None,
        )

    return await bounded([lambda item=item: grade(item) for item in items], concurrency, on_done)


def calibration_metrics(grades: Sequence[PairGrade], prefix: str = "quality.judge") -> tuple[list[Metric], list[str]]:
    """The agreement metric (gated), the tie and failure rates (reported), and a note when the judge drifted."""
    scored = [g for g in grades if g.agreement is not None]
    n = len(grades)
    agreement = sum(g.agreement or 0.0 for g in scored) / len(scored) if scored else 0.0
    ties = sum(1 for g in scored if g.judge_label == 0)
    metrics = [
        Metric(
            name=f"{prefix}.agreement",
            value=agreement,
            unit="ratio",
            direction=Direction.HIGHER_IS_BETTER,
            threshold=AGREEMENT_THRESHOLD,
            tolerance=AGREEMENT_TOLERANCE,
            n=len(scored),
            note="pairwise agreement with MT-Bench's human experts (tie = 0.5); below the threshold or falling "
            "beyond the tolerance: the judge drifted",
        ),
        Metric(
            name=f"{prefix}.tie_rate",
            value=ties / len(scored) if scored else 0.0,
            unit="ratio",
            direction=Direction.LOWER_IS_BETTER,
            n=len(scored),
            note="pairs the judge graded equal: it cannot tell the answers apart",
        ),
        Metric(
            name=f"{prefix}.calibration_failed_rate",
            value=(n - len(scored)) / n if n else 0.0,
            unit="ratio",
            direction=Direction.LOWER_IS_BETTER,
            threshold=0.2,
            n=n,
            note="calibration pairs whose grades failed (judge unreachable or reply unreadable)",
        ),
    ]
    notes = []
    if not scored:
        first = next((g.error for g in grades if g.error), None)
        notes.append(f"Judge calibration: no pair could be graded ({first}); the judge is unusable.")
    elif agreement < AGREEMENT_THRESHOLD:
        notes.append(
            f"Judge drifted: it agrees with MT-Bench's human experts on {agreement:.0%} of {len(scored)} pairs, "
            f"below {AGREEMENT_THRESHOLD:.0%}; its grades in this run are not trustworthy."
        )
    return metrics, notes


def calibration_cases(grades: Sequence[PairGrade]) -> list[CaseResult]:
    return [
        CaseResult(
            case_id=f"calibration/{g.item.id}",
            passed=None if g.agreement is None else g.agreement == 1.0,
            score=g.agreement,
            detail={
                "human_label": g.item.human_label,
                "judge_label": g.judge_label,
                "overall_1": g.overall_1,
                "overall_2": g.overall_2,
                **({"error": g.error} if g.error else {}),
            },
        )
        for g in grades
    ]

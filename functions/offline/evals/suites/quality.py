"""The quality suite: the golden set's prompts sent through the gateway (the plus eval tenant by default), each answer
checked programmatically where it can be (the final number of a GSM8K problem; HumanEval's unit tests run in a
sandbox) and graded 1-5 by the judge against the reference answer; then the judge's own calibration against human
experts (calibration.py).

Metrics, per tier and category: `quality.<tier>.<category>.pass_rate` (checkable categories: reasoning, coding) and
`quality.<tier>.<category>.judge_mean`; per tier `quality.<tier>.judge_mean` and `quality.<tier>.error_rate`;
`quality.judge.*` for the judge (unparsed grades, calibration agreement)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from functions.judging.client import JudgeClient
from functions.judging.verdict import JudgeRequest, JudgeVerdict
from functions.offline.evals.answers.answer_checks import extract_code, final_number, numbers_equal, program_with_tests
from functions.offline.evals.answers.sandbox import describe_isolation, run_python, unavailable_reason
from functions.offline.evals.asking import Answer, ask, bounded, default_model
from functions.offline.evals.calibration import balanced, calibration_cases, calibration_metrics, grade_pairs
from functions.offline.evals.golden.items import (
    CATEGORIES,
    DATA_DIR,
    GoldenItem,
    NumericCheck,
    load_calibration,
    load_golden,
    stratified,
)
from functions.offline.evals.suite import CaseResult, Direction, Metric, Progress, SuiteResult
from functions.offline.evals.target import EvalTarget
from functions.sandbox.protocol import SandboxUnavailableError
from shared.fleet.tiers import Tier

# Allowed worsening vs the baseline. A category holds 50-60 items: one item is ~2 points, so 0.1 is ~5 items.
PASS_RATE_TOLERANCE = 0.1
JUDGE_MEAN_TOLERANCE = 0.3  # on the 1-5 scale
ERROR_RATE_THRESHOLD = 0.05
BLOCKED_RATE_TOLERANCE = 0.02  # every golden prompt is benign: a new block is a safety-filter regression
# A local deployment (SmolLM2 on CPU, a few tokens a second when busy) caps answers here so a run ends in minutes;
# its answers are not worth more tokens.
LOCAL_MAX_TOKENS = 256
MIN_CALIBRATION_PAIRS = 8  # with --limit, calibration still grades at least this many pairs (16 judge calls)
LOCAL_JUDGE_NOTE = (
    "The local judge is SmolLM2-135M: its grades (judge means, calibration agreement) are noise. The programmatic "
    "pass rates (reasoning, coding) are real measurements."
)


class Graded(BaseModel):
    item: GoldenItem
    tier: Tier
    answer: Answer
    passed: bool | None  # None: no programmatic check
    check_detail: dict[str, Any]
    verdict: JudgeVerdict | None

    @property
    def overall(self) -> float | None:
        return self.verdict.scores.overall if self.verdict and self.verdict.scores else None


class QualitySuite:
    name = "quality"
    description = "golden set (coding, writing, Q&A, reasoning): programmatic checks + judge 1-5; judge calibration"

    def __init__(
        self,
        limit: int | None = None,
        *,
        tiers: Sequence[Tier] | None = None,
        concurrency: int = 4,
        max_tokens: int = 768,
        calibrate: bool = True,
        data_dir: Path = DATA_DIR,
    ) -> None:
        self.items = stratified(load_golden(data_dir), limit)
        pairs = load_calibration(data_dir)
        self.pairs = balanced(pairs, None if limit is None else max(limit, MIN_CALIBRATION_PAIRS)) if calibrate else []
        self.tiers = tuple(tiers) if tiers is not None else None
        self.concurrency = concurrency
        self.max_tokens = max_tokens

    async def run(self, target: EvalTarget, progress: Progress) -> SuiteResult:
        started = time.monotonic()
        # By default plus (the flagship) and, when the target has a free key, free too: mini is the cheap pool,
        # and its gap to the flagship is what a routing or model change moves.
        tiers = self.tiers or tuple(t for t in (Tier.PLUS, Tier.FREE) if t in target.keys)
        max_tokens = min(self.max_tokens, LOCAL_MAX_TOKENS) if target.local else self.max_tokens
        judge = JudgeClient(target.judge) if target.judge is not None else None
        progress.start(self.name, len(self.items) * len(tiers) + len(self.pairs))
        try:
            jobs = [
                lambda item=item, tier=tier: self._grade(target, judge, item, tier, max_tokens)
                for tier in tiers
                for item in self.items
            ]
            graded = await bounded(jobs, self.concurrency, lambda: progress.advance(self.name))
            grades = (
                await grade_pairs(
                    judge, self.pairs, concurrency=self.concurrency, on_done=lambda: progress.advance(self.name)
                )
                if judge is not None and self.pairs
                else []
            )
        finally:
            if judge is not None:
                await judge.aclose()
        result = SuiteResult(suite=self.name, cases=[_case(g) for g in graded] + calibration_cases(grades))
        for tier in tiers:
            result.metrics += tier_metrics(tier, [g for g in graded if g.tier is tier])
        result.metrics += judge_metrics(graded) if judge is not None else []
        if grades:
            metrics, notes = calibration_metrics(grades)
            result.metrics += metrics
            result.notes += notes
        if judge is None:
            result.error = "no judge configured: writing and Q&A items cannot be graded"
        if target.local:
            result.notes.append(LOCAL_JUDGE_NOTE + f" Answers were capped at {max_tokens} tokens.")
        if any(g.item.check and g.item.check.kind == "python_tests" for g in graded):
            if (reason := unavailable_reason()) is not None:
                refusal = f"coding answers were not run (no sandbox: {reason})"
                result.error = refusal if result.error is None else f"{result.error}; {refusal}"
            else:
                result.notes.append(f"Coding answers ran in: {describe_isolation()}.")
        result.duration_s = time.monotonic() - started
        return result

    async def _grade(
        self, target: EvalTarget, judge: JudgeClient | None, item: GoldenItem, tier: Tier, max_tokens: int
    ) -> Graded:
        messages = [{"role": "user", "content": item.prompt}]
        answer = await ask(target.client(tier), default_model(tier), messages, max_tokens=max_tokens)
        passed, detail = await check_answer(item, answer)
        verdict = None
        if judge is not None and answer.ok:
            request = JudgeRequest(
                question=item.prompt, answer=answer.text, reference=item.reference, category=item.category
            )
            verdict = await judge.judge(request)
        return Graded(item=item, tier=tier, answer=answer, passed=passed, check_detail=detail, verdict=verdict)


async def check_answer(item: GoldenItem, answer: Answer) -> tuple[bool | None, dict[str, Any]]:
    """(passed, detail) of the item's programmatic check; (None, {}) when it has none. A failed request fails it."""
    check = item.check
    if check is None:
        return None, {}
    if not answer.ok:
        return False, {"check": check.kind, "reason": "no answer"}
    if isinstance(check, NumericCheck):
        got = final_number(answer.text)
        return numbers_equal(got, check.answer), {"check": "numeric", "expected": check.answer, "got": got}
    code = extract_code(answer.text, check.entry_point)
    if code is None:
        return False, {"check": "python_tests", "reason": "no code in the answer"}
    try:
        run = await run_python(program_with_tests(code, check.header, check.tests, check.entry_point))
    except SandboxUnavailableError as exc:  # never run unisolated: the item is not graded, and the report says why
        return None, {"check": "python_tests", "reason": f"not run: {exc}"}
    detail = {"check": "python_tests", "timed_out": run.timed_out, "isolation": run.isolation}
    if not run.passed:
        detail["output_tail"] = run.output_tail[-300:]
    return run.passed, detail


def _case(g: Graded) -> CaseResult:
    detail: dict[str, Any] = {"tier": g.tier.value, "category": g.item.category, "source": g.item.source}
    detail.update(g.check_detail)
    if not g.answer.ok:
        detail["error"] = g.answer.error
    else:
        detail["finish_reason"] = g.answer.finish_reason
        detail["answer_chars"] = len(g.answer.text)
    if g.verdict is not None and g.verdict.scores is not None:
        detail["scores"] = g.verdict.scores.model_dump()
    elif g.verdict is not None:
        detail["judge_error"] = g.verdict.error
    return CaseResult(case_id=f"{g.tier.value}/{g.item.id}", passed=g.passed, score=g.overall, detail=detail)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def tier_metrics(tier: Tier, graded: Sequence[Graded]) -> list[Metric]:
    prefix = f"quality.{tier.value}"
    metrics: list[Metric] = []
    for category in CATEGORIES:
        of = [g for g in graded if g.item.category == category]
        checked = [g for g in of if g.passed is not None]
        if checked:
            metrics.append(
                Metric(
                    name=f"{prefix}.{category}.pass_rate",
                    value=sum(1 for g in checked if g.passed) / len(checked),
                    unit="ratio",
                    direction=Direction.HIGHER_IS_BETTER,
                    tolerance=PASS_RATE_TOLERANCE,
                    n=len(checked),
                    note="exact final number" if category == "reasoning" else "unit tests pass (sandboxed)",
                )
            )
        scored = [g.overall for g in of if g.overall is not None]
        if scored:
            metrics.append(
                Metric(
                    name=f"{prefix}.{category}.judge_mean",
                    value=_mean(scored),
                    unit="score",
                    direction=Direction.HIGHER_IS_BETTER,
                    tolerance=JUDGE_MEAN_TOLERANCE,
                    n=len(scored),
                    note="judge's mean of helpfulness, accuracy, format (1-5)",
                )
            )
    scored = [g.overall for g in graded if g.overall is not None]
    if scored:
        metrics.append(
            Metric(
                name=f"{prefix}.judge_mean",
                value=_mean(scored),
                unit="score",
                direction=Direction.HIGHER_IS_BETTER,
                tolerance=JUDGE_MEAN_TOLERANCE / 2,  # over all categories: four times the items, less noise
                n=len(scored),
            )
        )
    blocked = sum(1 for g in graded if g.answer.blocked)
    failed = sum(1 for g in graded if not g.answer.ok and not g.answer.blocked)
    metrics += [
        Metric(
            name=f"{prefix}.blocked_rate",
            value=blocked / len(graded) if graded else 0.0,
            unit="ratio",
            direction=Direction.LOWER_IS_BETTER,
            tolerance=BLOCKED_RATE_TOLERANCE,
            n=len(graded),
            note="benign golden prompts the safety pre-filter refused (400 content_policy_violation)",
        ),
        Metric(
            name=f"{prefix}.error_rate",
            value=failed / len(graded) if graded else 0.0,
            unit="ratio",
            direction=Direction.LOWER_IS_BETTER,
            threshold=ERROR_RATE_THRESHOLD,
            n=len(graded),
            note="requests the gateway failed otherwise (they also fail their checks)",
        ),
    ]
    return metrics


def judge_metrics(graded: Sequence[Graded]) -> list[Metric]:
    asked = [g for g in graded if g.verdict is not None]
    unparsed = sum(1 for g in asked if g.verdict is not None and g.verdict.scores is None)
    return [
        Metric(
            name="quality.judge.unscored_rate",
            value=unparsed / len(asked) if asked else 0.0,
            unit="ratio",
            direction=Direction.LOWER_IS_BETTER,
            threshold=0.2,
            n=len(asked),
            note="answers the judge failed to grade (unreachable, or a reply without readable scores)",
        )
    ]

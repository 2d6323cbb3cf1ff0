"""The quality suite against a real gateway on loopback: a worker that answers the golden items right or wrong, and
the scripted judge. Right answers pass the checks and grade well; wrong ones fail and grade low; a judge that
disagrees with the human experts is flagged as drifted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from functions.judging.client import JudgeEndpoint
from functions.offline.evals.golden.items import GoldenItem, NumericCheck, load_calibration, load_golden
from functions.offline.evals.suite import NullProgress, SuiteResult
from functions.offline.evals.suites.quality import QualitySuite
from functions.offline.evals.target import EvalTarget
from shared.fleet.tiers import Tier
from tests.integration.conftest import GatewayFactory
from tests.support.servers import serve
from tests.support.stand_ins.answering_worker import answering_worker
from tests.support.stand_ins.scripted_judge import marker_scores, scripted_judge

BY_PROMPT: dict[str, GoldenItem] = {item.prompt: item for item in load_golden()}
PREFERRED = {(p.question, p.answer_1 if p.human_label == 1 else p.answer_2) for p in load_calibration()}


def answerer(answer: Callable[[GoldenItem], str]) -> Callable[[list[dict]], str]:
    """The worker's reply: `answer` for a golden prompt; anything else (the gateway's own shadow-judge samples, sent
    to its flagship pool) gets a fixed grade."""

    def reply(messages: list[dict]) -> str:
        item = BY_PROMPT.get(messages[-1]["content"])
        return answer(item) if item else '{"helpfulness": 3, "accuracy": 3, "format": 3}'

    return reply


def right(item: GoldenItem) -> str:
    if isinstance(item.check, NumericCheck):
        return f"Let me work it out.\nAnswer: {item.check.answer}"
    return item.reference or ""


def wrong(item: GoldenItem) -> str:
    if isinstance(item.check, NumericCheck):
        return f"Answer: {int(float(item.check.answer)) + 7}"
    if item.check is not None:
        return f"```python\ndef {item.check.entry_point}(*args):\n    return None\n```"
    return "WRONG and UNHELPFUL"


def human_like(question: str, answer: str) -> tuple[int, int, int]:
    """Grades calibration answers as MT-Bench's experts would prefer them; golden answers by their markers."""
    if any(q == question for q, _ in PREFERRED):
        return (5, 5, 5) if (question, answer) in PREFERRED else (2, 2, 3)
    return marker_scores(question, answer)


def contrarian(question: str, answer: str) -> tuple[int, int, int]:
    h, a, f = human_like(question, answer)
    return (7 - h, 7 - a, 8 - f) if any(q == question for q, _ in PREFERRED) else (h, a, f)


@pytest.fixture
def run_quality(gateway_for: GatewayFactory) -> Iterator[Callable[..., SuiteResult]]:
    import asyncio

    stack = []

    def run(answer: Callable[[GoldenItem], str], scores=human_like, limit: int = 8) -> SuiteResult:
        worker = answering_worker(answerer(answer))
        judge_app = scripted_judge(scores)
        worker_ctx, judge_ctx = serve(worker), serve(judge_app)
        stack.extend([worker_ctx, judge_ctx])
        worker_url, judge_url = worker_ctx.__enter__(), judge_ctx.__enter__()
        gw = gateway_for({"mini": [worker_url], "flagship": [worker_url]})
        target = EvalTarget(
            gw.url, "run-1", {Tier.PLUS: gw.key}, judge=JudgeEndpoint(base_url=f"{judge_url}/v1", model="judge")
        )

        async def go() -> SuiteResult:
            try:
                return await QualitySuite(limit=limit, concurrency=2).run(target, NullProgress())
            finally:
                await target.aclose()

        result = asyncio.run(go())
        result.notes.append(f"judge calls: {judge_app.state.calls}")
        return result

    yield run
    for ctx in reversed(stack):
        ctx.__exit__(None, None, None)


def metric(result: SuiteResult, name: str) -> float:
    return next(m.value for m in result.metrics if m.name == name)


def test_right_answers_pass_and_wrong_answers_fail(run_quality: Callable[..., SuiteResult]) -> None:
    good = run_quality(right)
    assert good.error is None
    assert metric(good, "quality.plus.reasoning.pass_rate") == 1.0
    assert metric(good, "quality.plus.coding.pass_rate") == 1.0  # the canonical solutions pass their tests
    assert metric(good, "quality.plus.writing.judge_mean") == 5.0
    assert metric(good, "quality.plus.error_rate") == 0.0
    # The embedded safety pre-filter refuses one benign writing prompt (avocado calories) in this sample.
    assert metric(good, "quality.plus.blocked_rate") <= 0.125
    assert metric(good, "quality.judge.agreement") == 1.0
    assert not any("drifted" in note for note in good.notes)
    assert any("Coding answers ran in" in note for note in good.notes)

    bad = run_quality(wrong)
    assert metric(bad, "quality.plus.reasoning.pass_rate") == 0.0
    assert metric(bad, "quality.plus.coding.pass_rate") == 0.0
    assert metric(bad, "quality.plus.qa.judge_mean") < 3.0
    failed = [c for c in bad.cases if c.passed is False and c.detail.get("check") == "python_tests"]
    assert failed and all("output_tail" in c.detail for c in failed)
    # Every pass-rate and judge-mean metric carries a tolerance, so the gate can fail this run against `good`.
    worse = [m for m in bad.metrics if m.tolerance is not None and m.worsening(metric(good, m.name)) > m.tolerance]
    assert {m.name for m in worse} >= {"quality.plus.reasoning.pass_rate", "quality.plus.coding.pass_rate"}


def test_a_judge_that_disagrees_with_the_experts_is_flagged(run_quality: Callable[..., SuiteResult]) -> None:
    result = run_quality(right, scores=contrarian, limit=4)
    agreement = next(m for m in result.metrics if m.name == "quality.judge.agreement")
    assert agreement.value == 0.0 and agreement.breaks_threshold() and agreement.n == 8
    assert any(note.startswith("Judge drifted") for note in result.notes)


def test_without_a_judge_the_checks_still_run_and_the_suite_reports_an_error(
    gateway_for: GatewayFactory, tmp_path: Path
) -> None:
    import asyncio

    with serve(answering_worker(answerer(right))) as url:
        gw = gateway_for({"mini": [url], "flagship": [url]})
        target = EvalTarget(gw.url, "run-2", {Tier.PLUS: gw.key}, local=True)

        async def go() -> SuiteResult:
            try:
                return await QualitySuite(limit=4).run(target, NullProgress())
            finally:
                await target.aclose()

        result = asyncio.run(go())
    assert result.error and "no judge" in result.error
    assert metric(result, "quality.plus.reasoning.pass_rate") == 1.0
    assert any("SmolLM2" in note for note in result.notes)

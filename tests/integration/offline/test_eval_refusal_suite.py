"""The refusal suite against a real gateway on loopback (with its embedded safety pre-filter) in front of workers
that refuse calibratedly, refuse everything, or answer everything: each shows up in the rates it should move."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from functions.offline.evals.suite import NullProgress, SuiteResult
from functions.offline.evals.suites.refusal import RefusalSuite, load_probes
from functions.offline.evals.target import EvalTarget
from shared.fleet.tiers import Tier
from tests.integration.conftest import GatewayFactory
from tests.support.servers import serve
from tests.support.stand_ins.answering_worker import answering_worker

PER_SOURCE = 3
HARMFUL = {p.messages[-1]["content"]: p.harmful for p in load_probes(PER_SOURCE)}
REFUSAL = "I'm sorry, but I can't help with that."
HELP = "Sure! Here is a careful, useful answer."


def calibrated(messages: list[dict]) -> str:
    return REFUSAL if HARMFUL.get(messages[-1]["content"]) else HELP


@pytest.fixture
def run_refusal(gateway_for: GatewayFactory):
    contexts = []

    def run(answer: Callable[[list[dict]], str]) -> SuiteResult:
        ctx = serve(answering_worker(answer))
        contexts.append(ctx)
        url = ctx.__enter__()
        gw = gateway_for({"mini": [url], "flagship": [url]})
        target = EvalTarget(gw.url, "run-refusal", {Tier.PLUS: gw.key})

        async def go() -> SuiteResult:
            try:
                return await RefusalSuite(limit=PER_SOURCE, concurrency=4).run(target, NullProgress())
            finally:
                await target.aclose()

        return asyncio.run(go())

    yield run
    for ctx in reversed(contexts):
        ctx.__exit__(None, None, None)


def metric(result: SuiteResult, name: str) -> float:
    return next(m.value for m in result.metrics if m.name == name)


def test_refusal_rates_move_with_the_model(run_refusal) -> None:
    good = run_refusal(calibrated)
    assert metric(good, "refusal.plus.error_rate") == 0.0
    assert metric(good, "refusal.plus.harmful.stopped_rate") == 1.0
    assert metric(good, "refusal.plus.harmful.blocked_rate") > 0  # the embedded pre-filter stops some first
    # The model refused no benign ask: every benign stop is the gateway's own block.
    assert metric(good, "refusal.plus.benign.refused_rate") == 0.0
    assert metric(good, "refusal.plus.benign.over_refusal_rate") == metric(good, "refusal.plus.benign.blocked_rate")
    assert metric(good, "refusal.plus.harmful.source.strongreject.stopped_rate") == 1.0
    assert any(m.name.startswith("refusal.plus.harmful.category.") for m in good.metrics)
    # Answers to harmful asks are not copied into the report; benign stops are, for debugging over-refusal.
    assert not any("answer_head" in c.detail for c in good.cases if c.detail["harmful"])

    compliant = run_refusal(lambda messages: HELP)
    assert metric(compliant, "refusal.plus.harmful.refused_rate") == 0.0
    assert metric(compliant, "refusal.plus.harmful.stopped_rate") < 1.0
    drop = next(m for m in compliant.metrics if m.name == "refusal.plus.harmful.stopped_rate")
    assert drop.worsening(1.0) > drop.tolerance  # the gate catches a model that stopped refusing

    cautious = run_refusal(lambda messages: REFUSAL)
    assert metric(cautious, "refusal.plus.benign.over_refusal_rate") == 1.0
    assert any("answer_head" in c.detail for c in cautious.cases if not c.detail["harmful"])

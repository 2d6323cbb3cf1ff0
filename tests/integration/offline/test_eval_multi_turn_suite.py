"""The multi-turn suite against a real gateway on loopback, through its stored-conversation API. The worker answers
only from what the gateway sends it: an attentive one reads the stored history the gateway rendered in front of the
new turn and passes; a forgetful one (only the last turn) forgets the facts and ignores the constraints, and fails."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import pytest

from functions.judging.client import JudgeEndpoint
from functions.offline.evals.suite import NullProgress, SuiteResult
from functions.offline.evals.suites.multi_turn import MultiTurnSuite
from functions.offline.evals.target import EvalTarget
from shared.fleet.tiers import Tier
from tests.integration.conftest import GatewayFactory
from tests.support.servers import serve
from tests.support.stand_ins.answering_worker import answering_worker
from tests.support.stand_ins.scripted_judge import scripted_judge


def reply_from(history: str, ask: str) -> str:
    """An answer that uses whatever the earlier user turns (`history`) said, as a model that remembers would."""
    text = "Here is a short answer."
    if "signed with my name" in ask:
        name = re.search(r"My name is (\w+)", history)
        text = f"Please join us! Warmly, {name.group(1) if name else 'your host'}"
    elif "budget" in ask:
        amount = re.search(r"is (\d+) euros", history)
        text = f"You told me {amount.group(1)} euros." if amount else "I don't know."
    elif "booking reference" in ask:
        code = re.search(r"booking reference is (\w+)", history)
        text = f"It is {code.group(1)}." if code else "You haven't told me."
    elif ask.endswith("in Python?"):
        plain = "never include code" in history
        text = "Use the built-in function made for it." if plain else "```python\nitems.reverse()\n```"
    elif ask.startswith("Explain"):
        text = "In simple words: it works like this." if "write every answer for" in history else "WRONG UNHELPFUL"
    signoff = re.search(r"end every answer with the words '([^']+)'", history)
    return f"{text} {signoff.group(1)}" if signoff else text


def attentive(messages: list[dict]) -> str:
    history = "\n".join(m["content"] for m in messages[:-1] if m["role"] == "user")
    return reply_from(history, messages[-1]["content"])


def forgetful(messages: list[dict]) -> str:
    return reply_from("", messages[-1]["content"])


@pytest.fixture
def run_multi_turn(gateway_for: GatewayFactory):
    contexts = []

    def run(answer: Callable[[list[dict]], str], limit: int = 12) -> tuple[SuiteResult, list[dict]]:
        worker = answering_worker(answer)
        for ctx in (worker_ctx := serve(worker), judge_ctx := serve(scripted_judge())):
            contexts.append(ctx)
        worker_url, judge_url = worker_ctx.__enter__(), judge_ctx.__enter__()
        gw = gateway_for({"mini": [worker_url], "flagship": [worker_url]})
        target = EvalTarget(
            gw.url, "run-mt", {Tier.PLUS: gw.key}, judge=JudgeEndpoint(base_url=f"{judge_url}/v1", model="judge")
        )

        async def go() -> SuiteResult:
            try:
                return await MultiTurnSuite(limit=limit, concurrency=3).run(target, NullProgress())
            finally:
                await target.aclose()

        return asyncio.run(go()), worker.state.bodies

    yield run
    for ctx in reversed(contexts):
        ctx.__exit__(None, None, None)


def metric(result: SuiteResult, name: str) -> float:
    return next(m.value for m in result.metrics if m.name == name)


def test_a_model_that_sees_the_stored_history_passes(run_multi_turn) -> None:
    result, bodies = run_multi_turn(attentive)
    assert result.error is None
    assert metric(result, "multi_turn.plus.pass_rate") == 1.0
    assert metric(result, "multi_turn.plus.store_ok_rate") == 1.0
    assert metric(result, "multi_turn.plus.error_rate") == 0.0
    assert {c.detail["template"] for c in result.cases} >= {"name", "number", "no_code", "audience"}
    # The client sent one new user turn at a time; the worker got the whole rendered history from the gateway.
    assert max(sum(m["role"] == "user" for m in body["messages"]) for body in bodies) >= 4


def test_forgotten_facts_and_ignored_constraints_fail(run_multi_turn) -> None:
    result, _ = run_multi_turn(forgetful)
    assert metric(result, "multi_turn.plus.pass_rate") == 0.0
    assert metric(result, "multi_turn.plus.no_code.pass_rate") == 0.0
    assert metric(result, "multi_turn.plus.audience.pass_rate") == 0.0  # judged: the scripted judge reads WRONG
    assert metric(result, "multi_turn.plus.store_ok_rate") == 1.0  # the store worked; the model forgot
    failed = [c for c in result.cases if not c.passed]
    assert failed and all("answer_head" in c.detail for c in failed)

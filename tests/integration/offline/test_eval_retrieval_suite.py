"""The retrieval suite's smoke subset against a real gateway (files, vector stores, retrieval in chat) and the real
embedding worker on loopback: a reading worker answers a question with its gold answer only when a passage it was given
holds it, and the scripted judge grades "I don't know" low. So answers with retrieval match (and score SQuAD exact
match and F1) where recall hit, answers without never do, and the suite leaves no store or file behind."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from functions.judging.client import JudgeEndpoint
from functions.offline.evals.rag.items import load_questions
from functions.offline.evals.suite import NullProgress
from functions.offline.evals.suites.retrieval import RetrievalSuite
from functions.offline.evals.target import EvalTarget
from shared.fleet.tiers import Tier
from tests.integration.conftest import GatewayFactory
from tests.support.processes import embedding_worker_process
from tests.support.servers import serve
from tests.support.stand_ins.answering_worker import answering_worker
from tests.support.stand_ins.scripted_judge import scripted_judge

LIMIT = 6
QUESTIONS = {q.question: q for q in load_questions()}
UNKNOWN = "I don't know."


def reader(messages: list[dict]) -> str:
    """Answers from the passages it was given (the context message), as a perfect reader would; else cannot."""
    question = QUESTIONS.get(messages[-1]["content"])
    context = "\n".join(m["content"] for m in messages[:-1] if m["role"] == "system")
    if question is None:  # the gateway's shadow judge sampling an answer
        return '{"helpfulness": 3, "accuracy": 3, "format": 3}'
    found = [a.text for a in question.answers if a.text in context]
    return f"{found[0]} [1]" if found else UNKNOWN


@pytest.fixture(scope="module")
def embedding_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedding_worker_process(
        tmp_path_factory.mktemp("embedding-worker-logs"), "--threads", "1", timeout_s=180
    ) as url:
        yield url


def test_the_smoke_subset_measures_recall_and_the_gain_from_retrieval(
    gateway_for: GatewayFactory, embedding_worker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This measures what retrieval finds, not how fast: on busy shared cores the real MiniLM embedding of a question
    # has taken over the default 1.5 s budget, and a skipped retrieval is then counted (skipped_rate) as if it missed.
    monkeypatch.setenv("FLEETCHAT_RETRIEVAL_BUDGET_MS", "60000")
    judge = scripted_judge(lambda q, a: (1, 1, 3) if a == UNKNOWN else (5, 5, 5))
    with serve(answering_worker(reader)) as worker, serve(judge) as judge_url:
        gateway = gateway_for(
            {"mini": [worker], "flagship": [worker]},
            embedding_worker_urls={"text-embedding-minilm": [embedding_worker]},
        )
        target = EvalTarget(
            gateway.url, "run-1", {Tier.PLUS: gateway.key}, judge=JudgeEndpoint(base_url=f"{judge_url}/v1", model="j")
        )
        suite = RetrievalSuite(limit=LIMIT)
        result = asyncio.run(_run(suite, target))
        left = [httpx.get(f"{gateway.url}/v1/{what}", headers=gateway.headers()).json()["data"] for what in
                ("files", "vector_stores")]  # fmt: skip
    assert result.error is None, result.error
    values = {m.name: m.value for m in result.metrics}
    assert len(result.cases) == LIMIT and values["retrieval.error_rate"] == 0.0
    hits = sum(1 for case in result.cases if case.passed)
    assert values["retrieval.recall_at_5"] == hits / LIMIT >= 0.5  # MiniLM + BM25 find most supporting passages
    assert 0.0 <= values["retrieval.vector_recall_at_5"] <= 1.0
    # The reader answers right exactly when a passage it was given holds the answer; without passages, never.
    assert values["retrieval.with.answer_match"] >= hits / LIMIT > values["retrieval.without.answer_match"] == 0.0
    # SQuAD's scores come from the answers: the reader's (cited) answers score where it was given the passage.
    assert values["retrieval.with.exact_match"] >= hits / LIMIT > values["retrieval.without.exact_match"] == 0.0
    assert values["retrieval.with.f1"] >= values["retrieval.with.exact_match"]
    assert values["retrieval.without.f1"] == 0.0
    assert values["retrieval.with.judge_mean"] > values["retrieval.without.judge_mean"] == pytest.approx(5 / 3)
    assert values["retrieval.skipped_rate"] == 0.0
    assert left == [[], []]  # the suite removed its store and files


async def _run(suite: RetrievalSuite, target: EvalTarget):
    try:
        return await suite.run(target, NullProgress())
    finally:
        await target.aclose()

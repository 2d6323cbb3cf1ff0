"""The retrieval suite: SQuAD articles (functions/offline/evals/rag) put in a fresh vector store on the deployment, then
per question (a fixed sample): vector search alone (`POST /v1/vector_stores/{id}/search` with ranker `none`), a chat
with the store (the hybrid retrieval chat uses; its citations), and the same chat without it. A citation counts when
it is the question's document and its span holds a gold answer (SQuAD's answer spans are the known supporting
passages).

Metrics: `retrieval.recall_at_5` (chat's hybrid retrieval, first 5 citations) and `retrieval.vector_recall_at_5`
(vector search alone); per arm (`with`, `without`): `exact_match` and `f1` (SQuAD's standard scores against the gold
answers, functions/offline/evals/rag/squad_score.py), `answer_match` (a gold answer appears in the answer) and
`judge_mean` (the judge's 1-5 against the gold answer); `retrieval.skipped_rate` (over the latency budget) and
`retrieval.error_rate`; `retrieval.ingestion_s`. Both arms ask the same way (a short-answer instruction, then the
question), so the only difference between them is the passages retrieval adds."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx
import openai
from pydantic import BaseModel

from functions.judging.client import JudgeClient
from functions.judging.verdict import JudgeRequest
from functions.offline.evals.asking import bounded, default_model
from functions.offline.evals.rag.corpus import Corpus, CorpusError, create_corpus, remove_corpus
from functions.offline.evals.rag.items import DATA_DIR, Question, load_documents, load_questions, sample
from functions.offline.evals.rag.squad_score import best_exact_match, best_f1
from functions.offline.evals.suite import CaseResult, Direction, Metric, Progress, SuiteResult
from functions.offline.evals.target import EvalTarget
from shared.fleet.tiers import Tier

T = TypeVar("T")
K = 5
DEFAULT_QUESTIONS = 100  # of 705: recall within about +-0.08 (95 %), a run of minutes on the CPU stack
RECALL_THRESHOLD = 0.6  # MiniLM + BM25 over five articles' ~200 chunks; a broken index or fusion falls far below
RECALL_TOLERANCE = 0.08
ANSWER_TOLERANCE = 0.1
F1_TOLERANCE = 0.1
# SQuAD's answers are short spans, and its scores compare the answer's words with them: a model asked plainly answers
# in sentences, which EM can never match. Both arms get this same instruction.
SHORT_ANSWER = "Answer the question in as few words as possible: a name, a number or a short phrase."
JUDGE_TOLERANCE = 0.3
LOCAL_MAX_TOKENS = 96  # SQuAD answers are a few words; the CPU stack's answers are not worth more
LOCAL_NOTE = (
    "The local judge and answerer are SmolLM2-135M: judge means and answer matches say little about quality; the "
    "recall figures are real measurements of the retrieval path."
)


class Asked(BaseModel):
    question: Question
    vector_hit: bool | None = None
    hybrid_hit: bool | None = None
    status: str | None = None  # the chat's retrieval status
    with_answer: str | None = None
    without_answer: str | None = None
    with_score: float | None = None
    without_score: float | None = None
    error: str | None = None


async def _patient(call: Callable[[], Awaitable[T]], attempts: int = 4) -> T:
    """`call()`, again after the gateway's retry-after when it answers 429 (the suite's burst can pass the eval
    tenant's RPM: each question is a search, two chats and the embeddings they bill)."""
    for attempt in range(attempts):
        try:
            return await call()
        except (openai.RateLimitError, httpx.HTTPStatusError) as exc:
            response = exc.response
            if response.status_code != 429 or attempt == attempts - 1:
                raise
            await asyncio.sleep(min(float(response.headers.get("retry-after", "5")), 60.0))
    raise AssertionError("unreachable")


def contains_answer(answer: str | None, question: Question) -> bool:
    """Whether a gold answer appears in the answer (case, punctuation and spacing ignored; SQuAD's normalisation)."""
    if not answer:
        return False
    said = _normal(answer)
    return any(_normal(a.text) and f" {_normal(a.text)} " in f" {said} " for a in question.answers)


def uncited(answer: str | None) -> str:
    """The answer without its `[n]` citation markers (the context asks the model to cite; SQuAD's scores would count
    the marker's number as a word of the answer)."""
    return re.sub(r"\s*\[\d+\]", "", answer or "")


def _normal(text: str) -> str:
    text = re.sub(r"\b(a|an|the)\b", " ", re.sub(r"[^\w\s]", " ", text.lower()))
    return " ".join(text.split())


class RetrievalSuite:
    name = "retrieval"
    description = "SQuAD in a vector store: recall@5 (chat's hybrid, vector alone); answers with/without retrieval"

    def __init__(
        self,
        limit: int | None = None,
        *,
        tier: Tier = Tier.PLUS,
        concurrency: int = 2,
        max_tokens: int = 256,
        data_dir: Path = DATA_DIR,
    ) -> None:
        self.documents = load_documents(data_dir)
        self.questions = sample(load_questions(data_dir), limit or DEFAULT_QUESTIONS)
        self.tier = tier
        self.concurrency = concurrency
        self.max_tokens = max_tokens

    async def run(self, target: EvalTarget, progress: Progress) -> SuiteResult:
        started = time.monotonic()
        result = SuiteResult(suite=self.name)
        http = target.http(self.tier)
        progress.start(self.name, len(self.questions))
        try:
            corpus = await create_corpus(http, self.documents, f"eval-retrieval-{target.run_id}")
        except CorpusError as exc:
            result.error = f"the corpus could not be ingested: {exc}"
            return result
        judge = JudgeClient(target.judge) if target.judge is not None else None
        max_tokens = min(self.max_tokens, LOCAL_MAX_TOKENS) if target.local else self.max_tokens
        try:
            jobs = [lambda q=q: self._ask(target, corpus, judge, q, max_tokens) for q in self.questions]
            asked = await bounded(jobs, self.concurrency, lambda: progress.advance(self.name))
        finally:
            if judge is not None:
                await judge.aclose()
            await remove_corpus(http, corpus)
        result.cases = [_case(a) for a in asked]
        result.metrics = metrics(asked, corpus.ingestion_s)
        if judge is None:
            result.notes.append("No judge configured: answers are scored by gold-answer match only.")
        if target.local:
            result.notes.append(LOCAL_NOTE + f" Answers were capped at {max_tokens} tokens.")
        result.duration_s = time.monotonic() - started
        return result

    async def _ask(
        self, target: EvalTarget, corpus: Corpus, judge: JudgeClient | None, question: Question, max_tokens: int
    ) -> Asked:
        asked = Asked(question=question)
        http, client, model = target.http(self.tier), target.client(self.tier), default_model(self.tier)
        file_of = {doc: file_id for file_id, doc in corpus.documents.items()}
        try:

            async def search() -> httpx.Response:
                body = {"query": question.question, "max_num_results": K, "ranking_options": {"ranker": "none"}}
                return (await http.post(f"/v1/vector_stores/{corpus.store_id}/search", json=body)).raise_for_status()

            found = await _patient(search)
            asked.vector_hit = any(
                r["file_id"] == file_of[question.document_id]
                and question.supported_by(r["start_offset"], r["end_offset"])
                for r in found.json()["data"][:K]
            )
            messages: list[Any] = [
                {"role": "system", "content": SHORT_ANSWER},
                {"role": "user", "content": question.question},
            ]
            tool = {"type": "file_search", "vector_store_ids": [corpus.store_id], "max_num_results": K}
            with_ = await _patient(
                lambda: client.chat.completions.create(
                    model=model,
                    messages=messages,
                    max_tokens=max_tokens,
                    temperature=0,
                    tools=[tool],  # type: ignore[list-item]
                )
            )
            report = (with_.model_extra or {}).get("retrieval") or {}
            asked.status = report.get("status")
            asked.hybrid_hit = any(
                corpus.documents.get(c["file_id"]) == question.document_id
                and question.supported_by(c["start"], c["end"])
                for c in report.get("citations", [])[:K]
            )
            asked.with_answer = with_.choices[0].message.content or ""
            without = await _patient(
                lambda: client.chat.completions.create(
                    model=model, messages=messages, max_tokens=max_tokens, temperature=0
                )
            )
            asked.without_answer = without.choices[0].message.content or ""
        except (openai.APIError, httpx.HTTPError) as exc:
            asked.error = type(exc).__name__
            return asked
        if judge is not None:
            reference = question.answers[0].text
            for arm in ("with", "without"):
                answer = getattr(asked, f"{arm}_answer")
                verdict = await judge.judge(
                    JudgeRequest(question=question.question, answer=answer, reference=reference, category="qa")
                )
                if verdict.scores is not None:
                    setattr(asked, f"{arm}_score", verdict.scores.overall)
        return asked


def _rate(values: Sequence[bool]) -> float:
    return sum(values) / len(values) if values else 0.0


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def metrics(asked: Sequence[Asked], ingestion_s: float) -> list[Metric]:
    ok = [a for a in asked if a.error is None]
    higher, lower = Direction.HIGHER_IS_BETTER, Direction.LOWER_IS_BETTER
    out = [
        Metric(
            name="retrieval.recall_at_5", value=_rate([bool(a.hybrid_hit) for a in ok]), unit="ratio",
            direction=higher, threshold=RECALL_THRESHOLD, tolerance=RECALL_TOLERANCE, n=len(ok),
            note="chat's retrieval (BM25 + vectors, RRF, re-rank): a first-5 citation holds the gold answer",
        ),
        Metric(
            name="retrieval.vector_recall_at_5", value=_rate([bool(a.vector_hit) for a in ok]), unit="ratio",
            direction=higher, tolerance=RECALL_TOLERANCE, n=len(ok), note="vector search alone (the search endpoint)",
        ),
        Metric(
            name="retrieval.skipped_rate", value=_rate([a.status == "skipped" for a in ok]), unit="ratio",
            direction=lower, threshold=0.1, n=len(ok), note="chats answered without passages: over the latency budget",
        ),
        Metric(
            name="retrieval.error_rate", value=1 - len(ok) / len(asked) if asked else 0.0, unit="ratio",
            direction=lower, threshold=0.05, n=len(asked),
        ),
        Metric(name="retrieval.ingestion_s", value=round(ingestion_s, 2), unit="s", direction=lower, n=1),
    ]  # fmt: skip
    for arm in ("with", "without"):
        answers = [(uncited(getattr(a, f"{arm}_answer")), [g.text for g in a.question.answers]) for a in ok]
        out += [
            Metric(
                name=f"retrieval.{arm}.exact_match", value=_mean([best_exact_match(p, g) for p, g in answers]),
                unit="ratio", direction=higher, tolerance=ANSWER_TOLERANCE, n=len(ok),
                note=f"{arm} retrieval: SQuAD exact match (normalised answer equals a gold answer)",
            ),
            Metric(
                name=f"retrieval.{arm}.f1", value=_mean([best_f1(p, g) for p, g in answers]), unit="ratio",
                direction=higher, tolerance=F1_TOLERANCE, n=len(ok),
                note=f"{arm} retrieval: SQuAD token F1 against the best gold answer",
            ),
        ]  # fmt: skip
        matches = [contains_answer(getattr(a, f"{arm}_answer"), a.question) for a in ok]
        out.append(
            Metric(
                name=f"retrieval.{arm}.answer_match", value=_rate(matches), unit="ratio", direction=higher,
                tolerance=ANSWER_TOLERANCE, n=len(ok), note=f"{arm} retrieval: a gold answer appears in the answer",
            )
        )  # fmt: skip
        scores = [s for a in ok if (s := getattr(a, f"{arm}_score")) is not None]
        if scores:
            out.append(
                Metric(
                    name=f"retrieval.{arm}.judge_mean", value=_mean(scores), unit="score", direction=higher,
                    tolerance=JUDGE_TOLERANCE, n=len(scores), note=f"{arm} retrieval: judge 1-5 vs the gold answer",
                )
            )  # fmt: skip
    return out


def _case(a: Asked) -> CaseResult:
    detail: dict[str, Any] = {"document": a.question.document_id, "status": a.status}
    if a.error is not None:
        detail["error"] = a.error
    else:
        golds = [g.text for g in a.question.answers]
        detail.update(
            vector_hit=a.vector_hit,
            with_f1=round(best_f1(uncited(a.with_answer), golds), 3),
            without_f1=round(best_f1(uncited(a.without_answer), golds), 3),
            with_match=contains_answer(a.with_answer, a.question),
            without_match=contains_answer(a.without_answer, a.question),
            with_score=a.with_score,
            without_score=a.without_score,
        )
    return CaseResult(case_id=a.question.id, passed=a.hybrid_hit if a.error is None else False, detail=detail)

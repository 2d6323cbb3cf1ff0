"""The multi-turn coherence suite: synthetic conversations (conversation_templates.py) played through the gateway's
stored-conversation API, the way a client of it does: the first turn with `store: true`, every later one with only
the new user turn and the `conversation_id`, so the model sees the earlier turns only if the gateway stored and
rendered them. The turn three after a fact or constraint is checked (the fact appears; no code; the sign-off
appears), or graded by the judge; afterwards the stored conversation is read back (`GET /v1/conversations/{id}`)
and must hold exactly what was said, then it is deleted.

Metrics per tier: `multi_turn.<tier>.pass_rate` (gated), per template, `store_ok_rate` (must be 1), `error_rate`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from functions.judging.client import JudgeClient
from functions.judging.verdict import JudgeRequest
from functions.offline.evals.answers.answer_checks import has_code, mentions
from functions.offline.evals.asking import Answer, ask, bounded, default_model
from functions.offline.evals.conversation_templates import ConversationCase, TurnCheck, generate
from functions.offline.evals.suite import CaseResult, Direction, Metric, Progress, SuiteResult
from functions.offline.evals.target import EvalTarget
from shared.fleet.tiers import Tier

DEFAULT_CONVERSATIONS = 24
PASS_RATE_TOLERANCE = 0.1
JUDGED_PASS = 3.5  # a judged turn passes at this overall score or above
ERROR_RATE_THRESHOLD = 0.05
LOCAL_MAX_TOKENS = 128  # a local deployment (SmolLM2 on CPU) answers this much per turn, so a run ends in minutes
RENDERED_TURNS = 4  # the judge reads the last four exchanges (the checked turn and the three before it)


class Played(BaseModel):
    case: ConversationCase
    tier: Tier
    answers: list[Answer]
    conversation_id: str | None = None
    stored_ok: bool | None = None  # None: the conversation was never stored (an error said why)
    store_detail: str | None = None
    passed: bool = False
    score: float | None = None
    detail: dict[str, Any] = {}

    @property
    def error(self) -> str | None:
        failed = next((a for a in self.answers if not a.ok), None)
        if failed is not None:
            return failed.error
        return None if self.conversation_id else "the gateway did not store the conversation"


class MultiTurnSuite:
    name = "multi_turn"
    description = (
        "4-8 turn conversations through the stored-conversation API; turn N uses a fact or honours a constraint "
        "set in turn N-3"
    )

    def __init__(
        self,
        limit: int | None = None,
        *,
        seed: int = 0,
        tiers: Sequence[Tier] = (Tier.PLUS,),
        concurrency: int = 4,
        max_tokens: int = 256,
    ) -> None:
        self.cases = generate(limit if limit is not None else DEFAULT_CONVERSATIONS, seed)
        self.tiers = tuple(tiers)
        self.concurrency = concurrency
        self.max_tokens = max_tokens

    async def run(self, target: EvalTarget, progress: Progress) -> SuiteResult:
        started = time.monotonic()
        judge = JudgeClient(target.judge) if target.judge is not None else None
        progress.start(self.name, len(self.cases) * len(self.tiers))
        try:
            jobs = [lambda c=c, t=t: self._play(target, judge, c, t) for t in self.tiers for c in self.cases]
            played = await bounded(jobs, self.concurrency, lambda: progress.advance(self.name))
        finally:
            if judge is not None:
                await judge.aclose()
        result = SuiteResult(suite=self.name, cases=[_case(p) for p in played])
        for tier in self.tiers:
            result.metrics += tier_metrics(tier, [p for p in played if p.tier is tier])
        if judge is None and any(t.check and t.check.kind == "judge" for c in self.cases for t in c.turns):
            result.error = "no judge configured: the judged turns fail"
        if target.local:
            result.notes.append("The local judge is SmolLM2-135M: the judged (audience) turns' grades are noise.")
        result.duration_s = time.monotonic() - started
        return result

    async def _play(self, target: EvalTarget, judge: JudgeClient | None, case: ConversationCase, tier: Tier) -> Played:
        client, model = target.client(tier), default_model(tier)
        max_tokens = min(self.max_tokens, LOCAL_MAX_TOKENS) if target.local else self.max_tokens
        played = Played(case=case, tier=tier, answers=[])
        for turn in case.turns:
            extra = {"conversation_id": played.conversation_id} if played.conversation_id else {"store": True}
            answer = await ask(
                client, model, [{"role": "user", "content": turn.user}], max_tokens=max_tokens, extra_body=extra
            )
            played.answers.append(answer)
            if not answer.ok:
                break
            if played.conversation_id is None:
                stored = answer.conversation or {}
                if not stored.get("stored") or not stored.get("id"):
                    break
                played.conversation_id = stored["id"]
        if played.error is None:
            await _check_turn(played, judge)
        if played.conversation_id is not None:
            await _read_back(target, played)
        return played


async def _check_turn(played: Played, judge: JudgeClient | None) -> None:
    index = played.case.checked_turn
    check: TurnCheck = played.case.turns[index].check  # type: ignore[assignment]
    text = played.answers[index].text
    played.detail = {"check": check.kind, "set_at": check.set_at, "checked_turn": index + 1}
    if check.kind == "mentions":
        played.passed = mentions(text, check.needles)
        played.detail["needles"] = check.needles
    elif check.kind == "no_code":
        played.passed = not has_code(text)
    elif judge is None:
        played.detail["judge_error"] = "no judge configured"
    else:
        verdict = await judge.judge(
            JudgeRequest(question=_render(played, index), answer=text, reference=check.expectation)
        )
        if verdict.scores is None:
            played.detail["judge_error"] = verdict.error
        else:
            played.score = verdict.scores.overall
            played.passed = played.score >= JUDGED_PASS
    if not played.passed:
        played.detail["answer_head"] = text[:200]
        played.detail["finish_reason"] = played.answers[index].finish_reason  # "length": cut at max_tokens


def _render(played: Played, index: int) -> str:
    """The exchanges before the checked turn and the checked ask, as the judge's question."""
    lines = []
    for i in range(max(0, index - RENDERED_TURNS + 1), index):
        lines += [f"User: {played.case.turns[i].user}", f"Assistant: {played.answers[i].text}"]
    lines.append(f"User: {played.case.turns[index].user}")
    return "\n\n".join(lines)


async def _read_back(target: EvalTarget, played: Played) -> None:
    """The stored conversation must hold every user turn and answer, in order; then it is deleted."""
    http = target.http(played.tier)
    path = f"/v1/conversations/{played.conversation_id}"
    response = await http.get(path)
    if response.status_code != 200:
        played.stored_ok, played.store_detail = False, f"GET answered HTTP {response.status_code}"
    else:
        stored = [(m["role"], m["content"]) for m in response.json().get("messages", [])]
        said = []
        for turn, answer in zip(played.case.turns, played.answers, strict=False):
            if answer.ok:
                said += [("user", turn.user), ("assistant", answer.text)]
        played.stored_ok = stored == said
        if not played.stored_ok:
            played.store_detail = f"stored {len(stored)} messages, {len(said)} were said"
    await http.delete(path)


def _case(p: Played) -> CaseResult:
    detail: dict[str, Any] = {"tier": p.tier.value, "template": p.case.template, "turns": len(p.case.turns), **p.detail}
    if p.error:
        detail["error"] = p.error
    if p.stored_ok is not None:
        detail["stored_ok"] = p.stored_ok
    if p.store_detail:
        detail["store_detail"] = p.store_detail
    return CaseResult(case_id=f"{p.tier.value}/{p.case.id}", passed=p.passed, score=p.score, detail=detail)


def tier_metrics(tier: Tier, played: Sequence[Played]) -> list[Metric]:
    prefix = f"multi_turn.{tier.value}"
    n = len(played)
    if not n:
        return []
    metrics = [
        Metric(
            name=f"{prefix}.pass_rate",
            value=sum(p.passed for p in played) / n,
            unit="ratio",
            direction=Direction.HIGHER_IS_BETTER,
            tolerance=PASS_RATE_TOLERANCE,
            n=n,
            note="the turn three after a fact or constraint uses or honours it",
        )
    ]
    for template in sorted({p.case.template for p in played}):
        of = [p for p in played if p.case.template == template]
        metrics.append(
            Metric(
                name=f"{prefix}.{template}.pass_rate",
                value=sum(p.passed for p in of) / len(of),
                unit="ratio",
                direction=Direction.HIGHER_IS_BETTER,
                n=len(of),
            )
        )
    stored = [p for p in played if p.stored_ok is not None]
    metrics += [
        Metric(
            name=f"{prefix}.store_ok_rate",
            value=sum(bool(p.stored_ok) for p in stored) / len(stored) if stored else 0.0,
            unit="ratio",
            direction=Direction.HIGHER_IS_BETTER,
            threshold=1.0,
            n=len(stored),
            note="stored conversations read back holding exactly the turns said",
        ),
        Metric(
            name=f"{prefix}.error_rate",
            value=sum(1 for p in played if p.error) / n,
            unit="ratio",
            direction=Direction.LOWER_IS_BETTER,
            threshold=ERROR_RATE_THRESHOLD,
            n=n,
            note="conversations cut short by a failed or unstored turn (they fail)",
        ),
    ]
    return metrics

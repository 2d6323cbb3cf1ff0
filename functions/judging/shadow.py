"""The shadow judge: a share of the answers served by the candidate pool (`mini`) and the reference pool
(`flagship`) is graded by the judge off the request path, and their rolling score delta watched.

Flow: the request path calls `offer()` once an answer is complete and stored; `offer` is synchronous and O(1) (a
coin flip and `put_nowait` on a bounded queue, never an await), never raises, and drops and counts a sample when the
queue is full. A few worker tasks take samples from the queue, drop and count them when the judge budget (calls per
minute, a token bucket shared by the gateway replicas) is spent, redact PII from the question and the answer (in a
thread: the detector is CPU work), clip them, and call the judge. Nothing leaves the process unredacted; a redaction
that fails sends nothing. Verdicts feed per-pool rolling windows; the delta and an alert gauge follow, and the
alert's rise is logged once as a WARNING.

Eval-tenant traffic is not sampled: the eval job grades its own answers. Workers start and stop with the app
(`async with ShadowJudge(...)`); stopping cancels them, and samples still queued are discarded.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType

import httpx
from anyio import to_thread

from functions.judging.budget import Budget, CallBudget, FleetCallBudget
from functions.judging.client import JudgeClient, judge_endpoint
from functions.judging.rolling import RollingScores
from functions.judging.verdict import JudgeRequest, JudgeScores
from functions.metrics.gateway import GatewayMetrics
from functions.safety.pii import pii_detector
from shared.settings import Settings
from shared.storage.accounts import Tenant, TenantPurpose
from shared.storage.control_state import ControlState
from shared.wire.schemas import ChatMessage

log = logging.getLogger("fleetchat.shadow_judge")

# Bounds on what one sample sends the judge (characters): a small judge's context is ~8k tokens.
MAX_ANSWER_CHARS = 6000
MAX_TURN_CHARS = 2000
CONTEXT_TURNS = 4  # the turns before the last user turn shown to the judge, so a follow-up ask makes sense


class Outcome(StrEnum):
    SCORED = "scored"
    DROPPED_QUEUE_FULL = "dropped_queue_full"
    DROPPED_BUDGET = "dropped_budget"
    FAILED = "failed"


@dataclass(frozen=True)
class ShadowSample:
    pool: str
    messages: Sequence[ChatMessage]  # the conversation as the model saw it (stored history included)
    answer: str


def question_of(messages: Sequence[ChatMessage], redact: Callable[[str], str] = str) -> str:
    """The user's ask: the last user turn alone, or, in a longer conversation, it and the few turns before it. Each
    turn is redacted whole before it is clipped, so a cut never leaves half an address the detector cannot see."""
    turns = [m for m in messages if m.role in ("user", "assistant")]
    last_user = max((i for i, m in enumerate(turns) if m.role == "user"), default=None)
    if last_user is None:
        return ""
    shown = turns[max(0, last_user - CONTEXT_TURNS) : last_user + 1]
    if len(shown) == 1:
        return _clip(redact(shown[0].text()), MAX_TURN_CHARS)
    return "\n\n".join(f"{m.role}: {_clip(redact(m.text()), MAX_TURN_CHARS)}" for m in shown)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " [...]"


class ShadowJudge:
    def __init__(
        self,
        settings: Settings,
        client: JudgeClient | None,
        metrics: GatewayMetrics,
        redact: Callable[[str], str],
        *,
        rng: random.Random | None = None,
        budget: Budget | None = None,
    ) -> None:
        """`client` None (no judge could be named) or a share of 0 turns the shadow judge off: `offer` does nothing."""
        self.share = settings.shadow_judge.share
        self.pools = (settings.shadow_judge.candidate_pool, settings.shadow_judge.reference_pool)
        self.enabled = client is not None and self.share > 0
        self._client = client
        self._metrics = metrics
        self._redact = redact
        self._rng = rng or random.Random()
        self._workers_n = settings.shadow_judge.workers
        self._queue: asyncio.Queue[ShadowSample] = asyncio.Queue(maxsize=settings.shadow_judge.queue_size)
        self._budget = budget or CallBudget(settings.shadow_judge.calls_per_minute)
        self._rolling = RollingScores(
            candidate=self.pools[0],
            reference=self.pools[1],
            window=settings.shadow_judge.window,
            threshold=settings.shadow_judge.alert_delta,
            min_samples=settings.shadow_judge.min_samples,
        )
        self._alerting = False
        self._tasks: list[asyncio.Task[None]] = []
        metrics.shadow_queue_depth.set_function(self._queue.qsize)

    def offer(self, tenant: Tenant, pool: str, messages: Sequence[ChatMessage], answer: str) -> None:
        """Maybe sample a complete, stored answer for grading. Synchronous, O(1), never raises, never waits."""
        try:
            if not self.enabled or pool not in self.pools or not answer.strip():
                return
            if tenant.purpose == TenantPurpose.EVAL or self._rng.random() >= self.share:
                return
            try:
                self._queue.put_nowait(ShadowSample(pool, messages, answer))
            except asyncio.QueueFull:
                self._count(pool, Outcome.DROPPED_QUEUE_FULL)
        except Exception:  # the request path must never fail because of the shadow judge
            log.exception("shadow judge: could not take a sample")

    async def __aenter__(self) -> ShadowJudge:
        if self.enabled:
            self._tasks = [asyncio.create_task(self._work(), name=f"shadow-judge-{i}") for i in range(self._workers_n)]
            log.info("shadow judge on: share %.3f of %s answers", self.share, " and ".join(self.pools))
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _work(self) -> None:
        while True:
            sample = await self._queue.get()
            try:
                if not await self._budget.take():
                    self._count(sample.pool, Outcome.DROPPED_BUDGET)
                    continue
                await self._grade(sample)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("shadow judge: grading a sample failed")
                self._count(sample.pool, Outcome.FAILED)
            finally:
                self._queue.task_done()

    async def _grade(self, sample: ShadowSample) -> None:
        assert self._client is not None  # only enabled with a client
        # PII detection is CPU work: in a thread, so the event loop keeps serving requests.
        request = await to_thread.run_sync(self._redacted, sample)
        verdict = await self._client.judge(request)
        self._metrics.shadow_latency.observe(verdict.latency_s)
        if verdict.scores is None:
            # The reason is ours or the judge's status, never the graded text.
            log.info("shadow judge: no grade for a %s answer: %s", sample.pool, verdict.error)
            self._count(sample.pool, Outcome.FAILED)
            return
        self._record(sample.pool, verdict.scores)
        self._count(sample.pool, Outcome.SCORED)

    def _redacted(self, sample: ShadowSample) -> JudgeRequest:
        """What the judge gets: the ask and the answer with PII replaced by placeholders, then clipped."""
        question = question_of(sample.messages, self._redact)
        return JudgeRequest(question=question, answer=_clip(self._redact(sample.answer), MAX_ANSWER_CHARS))

    def _record(self, pool: str, scores: JudgeScores) -> None:
        rolling, metrics = self._rolling, self._metrics
        rolling.add(pool, scores)
        for criterion, value in rolling.means(pool).items():
            metrics.shadow_score.labels(pool, criterion).set(value)
        metrics.shadow_window_samples.labels(pool).set(rolling.count(pool))
        status = rolling.status()
        metrics.shadow_delta.set(status.delta)
        metrics.shadow_alert.set(1 if status.alert else 0)
        candidate, reference = self.pools
        if status.alert and not self._alerting:
            log.warning(
                "shadow judge alert: %s scores %.2f below %s (threshold %.2f; %d and %d scores in the windows)",
                candidate,
                status.delta,
                reference,
                rolling.threshold,
                status.candidate_n,
                status.reference_n,
            )
        elif self._alerting and not status.alert:
            log.info("shadow judge alert cleared: %s - %s delta %.2f", reference, candidate, status.delta)
        self._alerting = status.alert

    def _count(self, pool: str, outcome: Outcome) -> None:
        self._metrics.shadow_samples.labels(pool, outcome).inc()


def shadow_judge_for(
    settings: Settings, http: httpx.AsyncClient, metrics: GatewayMetrics, shared: ControlState
) -> ShadowJudge:
    """The gateway's shadow judge: the judge named in settings over the gateway's HTTP client, PII redacted by the
    shared detector, its budget the fleet's. Off when the share is 0, or (with a WARNING) when no judge can be named."""
    client = None
    if settings.shadow_judge.share > 0:
        try:
            client = JudgeClient(judge_endpoint(settings), http=http)
        except ValueError as exc:
            log.warning("shadow judge off: %s", exc)
    budget = FleetCallBudget(shared, settings.shadow_judge.calls_per_minute)
    return ShadowJudge(settings, client, metrics, pii_detector().redact, budget=budget)

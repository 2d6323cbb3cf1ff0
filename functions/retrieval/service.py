"""Retrieval as the chat route uses it: `plan` (which stores a request names; a 400 or 404 before anything is charged),
then `retrieve` (search within the latency budget, fit the passages into the context budget, screen them) giving a
`Retrieved`: the request with its context message, the response header and `retrieval` field, the citations.

Retrieval never fails a chat request once planned: over its latency budget, or with the embedding pool or the index
failing, the request is answered without passages and says so (`x-fleetchat-retrieval: skipped`, `retrieval.reason`)."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from anyio import to_thread
from prometheus_client import CollectorRegistry, Counter, Histogram

from functions.accounts.auth import Caller
from functions.retrieval import context
from functions.retrieval.hybrid import HybridSearch, PassageReranker, StoreSearch
from functions.safety.findings import SafetyFinding
from functions.safety.injection_screen import InjectionScreen, shipped_injection_screen
from shared.errors import InvalidRequestError, NotFoundError, ServiceUnavailableError
from shared.fleet.tables import limits_for
from shared.settings import RetrievalSettings
from shared.storage.safety_audit import SafetyAction, SafetyDetector, SafetyLayer
from shared.wire.files_api import CompoundFilter, Filter
from shared.wire.retrieval_api import RETRIEVAL_HEADER, Citation, RetrievalReport, RetrievalStatus
from shared.wire.schemas import ChatCompletionRequest

log = logging.getLogger("fleetchat.retrieval")


class RetrievalMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "fleetchat_gateway_retrieval_requests", "Chat requests that asked for retrieval, by status and reason.",
            ["status", "reason"], registry=registry,
        )  # fmt: skip
        self.seconds = Histogram(
            "fleetchat_gateway_retrieval_seconds", "Time spent retrieving (embedding, searches, re-rank).",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0), registry=registry,
        )  # fmt: skip
        self.withheld = Counter(
            "fleetchat_gateway_retrieval_withheld_passages", "Passages the safety screen kept out of a prompt.",
            registry=registry,
        )  # fmt: skip


@dataclass(frozen=True)
class Plan:
    stores: list[Any]  # the caller's stores, as the files service's `require` returned them (id, revision)
    max_results: int
    filters: dict[str, Filter | None] = field(default_factory=dict)  # per store id (a file_search tool's)
    score_threshold: float = 0.0
    weights: tuple[float, float] = (1.0, 1.0)  # (vector, keyword) in the fusion


@dataclass
class Retrieved:
    report: RetrievalReport | None = None  # None: the request asked for no retrieval
    context: Any = None  # the context message (None: nothing to add)
    citations: list[Citation] = field(default_factory=list)

    def apply(self, body: ChatCompletionRequest) -> ChatCompletionRequest:
        if self.context is None:
            return body
        return body.model_copy(update={"messages": context.with_context(body.messages, self.context)})

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.report is None else {RETRIEVAL_HEADER: self.report.status}

    @property
    def stored(self) -> list[Citation] | None:
        """The citations as a stored turn keeps them: without the passages' text (the file keeps that, under its own
        retention and erasure)."""
        return [c.model_copy(update={"text": None}) for c in self.citations] or None

    def annotate(self, completion: dict[str, Any]) -> dict[str, Any]:
        if self.report is not None:
            completion["retrieval"] = self.report.model_dump(mode="json")
        return completion

    def annotated(self, events: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
        """A stream's events with the `retrieval` object on its first chunk (unchanged without retrieval)."""
        return events if self.report is None else self._annotated(events, self.report)

    @staticmethod
    async def _annotated(events: AsyncGenerator[bytes, None], report: RetrievalReport) -> AsyncGenerator[bytes, None]:
        pending = True
        async with contextlib.aclosing(events):  # closing this stream closes the worker's (its connection goes back)
            async for event in events:
                if pending and event.startswith(b"data: {"):
                    chunk = json.loads(event[len(b"data: ") :])
                    chunk["retrieval"] = report.model_dump(mode="json")
                    event = b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
                    pending = False
                yield event


class WithheldAudit(Protocol):
    """Where a request's withheld passages are audited (the safety pipeline's `record`)."""

    async def record(
        self, finding: SafetyFinding, action: SafetyAction, caller: Caller, request_id: str, model: str
    ) -> None: ...


class Retrieval:
    def __init__(
        self,
        stores: StoreSearch | None,
        context_tokens: dict[str, int],
        settings: RetrievalSettings,
        metrics: RetrievalMetrics,
        injection: InjectionScreen | None = None,
        audit: WithheldAudit | None = None,
        reranker: PassageReranker | None = None,
    ) -> None:
        self.stores = stores
        self.context_tokens = context_tokens
        self.settings = settings
        self.metrics = metrics
        self.injection = injection
        self.audit = audit
        self.search = HybridSearch(stores, settings, reranker) if stores is not None else None

    async def plan(self, caller: Caller, body: ChatCompletionRequest) -> Plan | None:
        """The stores this request names (`vector_store_ids`, or `file_search` tools), each checked to be the caller's
        (another tenant's or an unknown id: 404, nothing charged); None when it names none."""
        ids = list(body.vector_store_ids or [])
        limits = [t.max_num_results for t in body.file_search or [] if t.max_num_results is not None]
        for tool in body.file_search or []:
            ids.extend(tool.vector_store_ids)
        ids = list(dict.fromkeys(ids))
        if not ids:
            return None
        if self.stores is None:
            raise ServiceUnavailableError("Vector stores are not available on this deployment.", retry_after_s=60)
        filters, threshold, weights = _search_options(body)
        stores = []
        for store_id in ids:
            try:
                stores.append(await self.stores.require(caller, store_id))
            except NotFoundError as exc:
                raise NotFoundError(str(exc.message), param="vector_store_ids", code=exc.code) from exc
        return Plan(stores, min([self.settings.max_passages, *limits]), filters, threshold, weights)

    async def retrieve(
        self, plan: Plan | None, caller: Caller, body: ChatCompletionRequest, pool: str, request_id: str = ""
    ) -> Retrieved:
        if plan is None:
            return Retrieved()
        started = time.perf_counter()
        ids = [s.id for s in plan.stores]
        budget_ms = self.settings.budget_ms

        def report(status: RetrievalStatus, reason: str | None = None, **more: Any) -> RetrievalReport:
            elapsed = time.perf_counter() - started
            self.metrics.requests.labels(status, reason or "").inc()
            self.metrics.seconds.observe(elapsed)
            return RetrievalReport(
                status=status, reason=reason, vector_store_ids=ids, elapsed_ms=round(elapsed * 1000),
                budget_ms=budget_ms, **more,
            )  # fmt: skip

        question = next((m.text() for m in reversed(body.messages) if m.role == "user"), "").strip()
        tier_output = limits_for(caller.tenant.tier, caller.tenant.limits).max_output_tokens
        room = context.room_for_passages(
            self.context_tokens.get(pool, 0), body.messages, body.max_tokens, tier_output,
            self.settings.max_context_share,
        )  # fmt: skip
        if room < context.MIN_ROOM_TOKENS or not question:
            return Retrieved(report("no_room" if question else "empty", None if question else "no_question"))
        passages = None
        reason = "latency_budget"
        with anyio.move_on_after(budget_ms / 1000):
            try:
                assert self.search is not None  # plan() refused the request otherwise
                passages = await self.search.search(
                    caller, plan.stores, question, plan.max_results, filters=plan.filters,
                    score_threshold=plan.score_threshold, weights=plan.weights,
                )  # fmt: skip
            # The embedding pool or the index failed (or a store was deleted since `plan`): passages are an aid the
            # answer can do without, so no failure of theirs fails the chat; it is logged, counted and reported.
            except Exception as exc:
                log.warning("retrieval failed (%s); answering without passages", type(exc).__name__)
                reason = "search_failed"
        if passages is None:
            log.warning("retrieval skipped (%s) after %.0f ms", reason, (time.perf_counter() - started) * 1000)
            return Retrieved(report("skipped", reason))
        screened = await to_thread.run_sync(context.screened, passages, self.injection)
        self.metrics.withheld.inc(screened.withheld)
        if screened.injected:
            await self._audited(screened, caller, request_id, pool)
        counts = {"withheld": screened.withheld, "withheld_injection": len(screened.injected)}
        kept = context.packed(screened.kept, room)
        if not kept:
            return Retrieved(report("empty", **counts))
        message = context.context_message(kept)
        cited = context.citations(kept)
        used = len(message.text().encode())
        return Retrieved(report("used", citations=cited, context_tokens=used, **counts), message, cited)

    async def _audited(self, screened: context.Screened, caller: Caller, request_id: str, pool: str) -> None:
        """One audit record for the request: the most suspicious flagged passage (the record keys on request and
        layer)."""
        passage, score = max(screened.injected, key=lambda pair: pair[1])
        log.info("retrieval withheld %d passages flagged as planted instructions", len(screened.injected))
        if self.audit is None or self.injection is None or not request_id:
            return
        finding = SafetyFinding(
            layer=SafetyLayer.CONTEXT, detector=SafetyDetector.INJECTION_SCREEN, category="prompt_injection",
            score=min(1.0, score), excerpt=passage.hit.text, policy_version=f"injection-{self.injection.meta.version}",
        )  # fmt: skip
        await self.audit.record(finding, SafetyAction.WITHHELD, caller, request_id, pool)


def _search_options(body: ChatCompletionRequest) -> tuple[dict[str, Filter | None], float, tuple[float, float]]:
    """Per store, the filter of the `file_search` tools naming it (a store two tools name passes either tool's
    filter; one named by `vector_store_ids` or an unfiltered tool: no filter); the highest `score_threshold`; the
    tools' `hybrid_search` weights (several tools must agree: a 400 otherwise)."""
    per_store: dict[str, list[Filter | None]] = {s: [None] for s in body.vector_store_ids or []}
    threshold, weights = 0.0, set()
    for tool in body.file_search or []:
        for store_id in tool.vector_store_ids:
            per_store.setdefault(store_id, []).append(tool.filters)
        ranking = tool.ranking_options
        if ranking is not None:
            threshold = max(threshold, ranking.score_threshold)
            if ranking.hybrid_search is not None:
                weights.add((ranking.hybrid_search.embedding_weight, ranking.hybrid_search.text_weight))
    if len(weights) > 1:
        raise InvalidRequestError(
            "file_search tools disagree on ranking_options.hybrid_search; give every tool the same weights.",
            param="tools", code="invalid_value",
        )  # fmt: skip
    filters: dict[str, Filter | None] = {}
    for store_id, named in per_store.items():
        if any(f is None for f in named):
            filters[store_id] = None
        else:
            unique = list({f.model_dump_json(): f for f in named if f is not None}.values())
            either = CompoundFilter.model_construct(type="or", filters=unique)  # each was checked; their union is not
            filters[store_id] = unique[0] if len(unique) == 1 else either
    return filters, threshold, next(iter(weights), (1.0, 1.0))


def retrieval_for(state: Any) -> Retrieval:
    """The app's retrieval, from the files service's search (`state.vector_search`) and the pools' context lengths
    (admission's); made once at start-up, after both are installed."""
    metrics = RetrievalMetrics(state.metrics.registry)
    return Retrieval(
        state.vector_search, state.accounting.admission.context_tokens, state.settings.retrieval, metrics,
        injection=shipped_injection_screen(), audit=state.safety, reranker=state.rerank,
    )  # fmt: skip

"""`/v1/rerank` behind the router: prepare the pairs with the pool's tokenizer (a 400 changes nothing), admit the exact
token count against the tenant's RPM/TPM (input only, like an embedding), ask a re-rank worker (vLLM's `/v1/rerank`:
a cross-encoder deployed, the fused rank locally; retried on the next replica before the first byte, each replica
behind its breaker, as chat), answer in the shape Cohere, Jina and vLLM share, write one ledger entry under
`rerank:<pool>` (billed on the re-rank meter, functions/metering/meters.py) and count the metrics.

Retrieval's re-rank stage (functions/retrieval/hybrid.py) calls `rerank` too, so its pairs are admitted and billed
like any client's."""

from __future__ import annotations

from typing import Any

import httpx
from anyio import to_thread
from prometheus_client import CollectorRegistry, Counter

from functions.accounts.auth import Caller
from functions.control.request_accounting import Accounting, TokenUsage
from functions.control.routing import PoolRouter
from functions.metrics.failover import FailoverMetrics
from functions.worker_client import WorkerClient, routed_workers
from shared.errors import ModelNotFoundError, UpstreamError
from shared.fleet.rerank_pools import RERANK_LEDGER_PREFIX, PreparedPairs, RerankPool, prepared_pairs
from shared.fleet.tables import get_rerank_pool
from shared.settings import Settings
from shared.storage.ledger import Outcome
from shared.wire.rerank_api import (
    BilledUnits,
    RerankMeta,
    RerankRequest,
    RerankResponse,
    RerankResult,
    RerankUsage,
    WorkerRerankRequest,
    WorkerRerankResponse,
)

RERANK_PATH = "/v1/rerank"


class RerankMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.documents = Counter(
            "fleetchat_gateway_rerank_documents", "Documents re-ranked (answered requests), by model.", ["model"],
            registry=registry,
        )  # fmt: skip
        self.tokens = Counter(
            "fleetchat_gateway_rerank_tokens", "Pair tokens scored and billed, by model.", ["model"],
            registry=registry,
        )  # fmt: skip


class RerankService:
    def __init__(
        self, router: PoolRouter, workers: WorkerClient, accounting: Accounting, metrics: RerankMetrics
    ) -> None:
        self.router = router
        self.workers = workers
        self.accounting = accounting
        self.metrics = metrics

    def pool_for(self, model: str) -> RerankPool:
        pool = get_rerank_pool(model)
        if pool is None or model not in self.router.pools:
            message = f"The model `{model}` does not exist or you do not have access to it."
            raise ModelNotFoundError(message, param="model")
        return pool

    async def rerank(self, caller: Caller, request: RerankRequest) -> tuple[dict[str, Any], dict[str, str]]:
        """The response body and its headers (request id, x-ratelimit-*). Bad input raises before anything is
        charged; a worker that fails closes the account unbilled."""
        pool = self.pool_for(request.model)
        pairs = await to_thread.run_sync(prepared_pairs, pool, request)
        account = await self.accounting.open_input_only(caller, pairs.tokens, RERANK_LEDGER_PREFIX + pool.name)
        async with account.closed_if_raising():
            body = WorkerRerankRequest(model=pool.name, query=pairs.query, documents=pairs.windows, top_n=0)
            headers = {"x-request-id": account.request_id}
            replicas = self.router.candidates(pool.name, None)
            answer = await self.workers.complete(
                pool.name, replicas, body.model_dump(exclude_none=True), headers, path=RERANK_PATH
            )
            scored = _checked_answer(answer, len(pairs.windows))
        tokens = scored.usage.total_tokens
        await account.close(TokenUsage(tokens, 0), Outcome.COMPLETED)
        self.metrics.documents.labels(pool.name).inc(len(pairs.documents))
        self.metrics.tokens.labels(pool.name).inc(tokens)
        response = _response(request, pool, pairs, scored, account.request_id, tokens)
        return response.model_dump(exclude_none=True), account.headers

    async def scores(self, caller: Caller, model: str, query: str, documents: list[str]) -> list[float]:
        """Each document's relevance to `query` (retrieval's re-rank stage), admitted and billed as `rerank`."""
        request = RerankRequest(model=model, query=query, documents=list(documents), return_documents=False)
        body, _ = await self.rerank(caller, request)
        scores = [0.0] * len(documents)
        for result in body["results"]:
            scores[result["index"]] = result["relevance_score"]
        return scores


def _checked_answer(answer: dict[str, Any], windows: int) -> WorkerRerankResponse:
    """The worker's answer, only if it is whole: one score per window sent (else a 502, nothing billed)."""
    try:
        scored = WorkerRerankResponse.model_validate(answer)
    except ValueError as exc:
        raise UpstreamError("The re-rank worker returned an unreadable response.") from exc
    if sorted(result.index for result in scored.results) != list(range(windows)):
        raise UpstreamError("The re-rank worker did not return one score per document.")
    return scored


def _response(
    request: RerankRequest, pool: RerankPool, pairs: PreparedPairs, scored: WorkerRerankResponse, request_id: str,
    tokens: int,
) -> RerankResponse:  # fmt: skip
    by_window = [0.0] * len(pairs.windows)
    for result in scored.results:
        by_window[result.index] = result.relevance_score
    scores = pairs.document_scores(by_window)
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    if request.top_n:
        order = order[: request.top_n]
    results = [
        RerankResult(
            index=i, relevance_score=scores[i], document=_document(request, i) if request.return_documents else None
        )
        for i in order
    ]
    return RerankResponse(
        id=f"rerank-{request_id}",
        model=pool.name,
        results=results,
        usage=RerankUsage(prompt_tokens=tokens, total_tokens=tokens),
        meta=RerankMeta(billed_units=BilledUnits(input_tokens=tokens, search_units=pairs.search_units())),
    )


def _document(request: RerankRequest, index: int) -> dict[str, Any]:
    """The document as sent: a string as `{"text": ...}`, an object as it came."""
    sent = request.documents[index]
    return {"text": sent} if isinstance(sent, str) else sent


def rerank_service_for(
    settings: Settings, client: httpx.AsyncClient, accounting: Accounting, metrics: RerankMetrics,
    failover: FailoverMetrics | None = None,
) -> RerankService:  # fmt: skip
    """The gateway's re-rank service on the configured re-rank workers, with chat's breaker and retry policy."""
    router, workers = routed_workers(settings, settings.resolved_rerank_worker_urls(), client, failover)
    return RerankService(router, workers, accounting, metrics)

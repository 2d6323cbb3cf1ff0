"""`/v1/embeddings` behind the router: check the inputs with the pool's own tokenizer (a 400 changes nothing), admit
the exact token count against the tenant's RPM/TPM (like a moderation: input only), ask an embedding worker (retried
on the next replica before the first byte, each replica behind its breaker, as chat), write one ledger entry under
`embedding:<pool>` (billed on its own Stripe meter, functions/metering/meters.py) and count the metrics."""

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
from shared.fleet.embedding_pools import EmbeddingPool, checked_inputs
from shared.fleet.tables import get_embedding_pool
from shared.settings import Settings
from shared.storage.ledger import EMBEDDING_MODEL_PREFIX, Outcome
from shared.wire.embeddings_api import EmbeddingRequest, EmbeddingResponse

# Ledger entries of embeddings read `embedding:<pool>`: the meter exporter bills them on the embedding meter only.
LEDGER_MODEL_PREFIX = EMBEDDING_MODEL_PREFIX
EMBEDDINGS_PATH = "/v1/embeddings"


class EmbeddingMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.inputs = Counter(
            "fleetchat_gateway_embedding_inputs", "Inputs embedded (answered requests), by model.", ["model"],
            registry=registry,
        )  # fmt: skip
        self.tokens = Counter(
            "fleetchat_gateway_embedding_tokens", "Input tokens embedded and billed, by model.", ["model"],
            registry=registry,
        )  # fmt: skip


class EmbeddingService:
    def __init__(
        self, router: PoolRouter, workers: WorkerClient, accounting: Accounting, metrics: EmbeddingMetrics
    ) -> None:
        self.router = router
        self.workers = workers
        self.accounting = accounting
        self.metrics = metrics

    def pool_for(self, model: str) -> EmbeddingPool:
        pool = get_embedding_pool(model)
        if pool is None or model not in self.router.pools:
            message = f"The model `{model}` does not exist or you do not have access to it."
            raise ModelNotFoundError(message, param="model")
        return pool

    async def embed(self, caller: Caller, request: EmbeddingRequest) -> tuple[dict[str, Any], dict[str, str]]:
        """The OpenAI response body and its headers (request id, x-ratelimit-*). Bad input raises before anything is
        charged; a worker that fails closes the account unbilled."""
        pool = self.pool_for(request.model)
        _, counts = await to_thread.run_sync(checked_inputs, pool, request)
        tokens = sum(counts)
        account = await self.accounting.open_input_only(caller, tokens, LEDGER_MODEL_PREFIX + pool.name)
        async with account.closed_if_raising():
            body = request.model_dump(exclude_none=True)
            body.pop("user", None)  # an end-user id is for abuse monitoring here; the worker has no use for it
            # Checked above (only the model's own size passes); vLLM refuses `dimensions` outright for a model that is
            # not Matryoshka-trained, so it is not forwarded.
            body.pop("dimensions", None)
            headers = {"x-request-id": account.request_id}
            replicas = self.router.candidates(pool.name, None)
            answer = await self.workers.complete(pool.name, replicas, body, headers, path=EMBEDDINGS_PATH)
            response = _checked_answer(answer, len(counts))
        await account.close(TokenUsage(response.usage.prompt_tokens, 0), Outcome.COMPLETED)
        self.metrics.inputs.labels(pool.name).inc(len(counts))
        self.metrics.tokens.labels(pool.name).inc(response.usage.prompt_tokens)
        return response.model_dump(), account.headers


def _checked_answer(answer: dict[str, Any], inputs: int) -> EmbeddingResponse:
    """The worker's answer, only if it is whole: one embedding per input, in order (else a 502, nothing billed)."""
    try:
        response = EmbeddingResponse.model_validate(answer)
    except ValueError as exc:
        raise UpstreamError("The embedding worker returned an unreadable response.") from exc
    if [item.index for item in response.data] != list(range(inputs)):
        raise UpstreamError("The embedding worker did not return one embedding per input.")
    return response


def embedding_service_for(
    settings: Settings, client: httpx.AsyncClient, accounting: Accounting, metrics: EmbeddingMetrics,
    failover: FailoverMetrics | None = None,
) -> EmbeddingService:  # fmt: skip
    """The gateway's embedding service on the configured embedding workers, with chat's breaker and retry policy."""
    router, workers = routed_workers(settings, settings.resolved_embedding_worker_urls(), client, failover)
    return EmbeddingService(router, workers, accounting, metrics)

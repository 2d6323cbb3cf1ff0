"""The embedding worker's HTTP app: OpenAI `/v1/embeddings`, `/v1/models`, `/health` and Prometheus `/metrics` — what
`vllm serve --runner pooling` exposes for an embedding model, so the gateway cannot tell the two apart — and, for the
re-rank pools whose local worker it is, vLLM's `/v1/rerank` (also `/rerank`, `/v2/rerank`) with the fused rank
(gpu_workers/embeddings/fused_rerank.py).

Inputs are checked as the gateway checks them (shared/fleet/embedding_pools.py: a 400 for what the model cannot take),
then embedded by the micro-batcher (gpu_workers/embeddings/batcher.py), which shares forward passes between requests.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gpu_workers.embeddings.batcher import Encode, MicroBatcher
from gpu_workers.embeddings.fused_rerank import FusedReranker
from shared import metric_names as names
from shared.errors import ModelNotFoundError
from shared.fleet.embedding_pools import EmbeddingPool, checked_inputs
from shared.fleet.rerank_pools import RerankPool, checked_worker_pairs
from shared.fleet.tables import get_embedding_pool, tables
from shared.wire.embeddings_api import Embedding, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage, encode_vector
from shared.wire.http_errors import BodySizeLimitMiddleware, install_error_handlers
from shared.wire.rerank_api import (
    RerankDocument,
    WorkerRerankRequest,
    WorkerRerankResponse,
    WorkerRerankResult,
    WorkerRerankUsage,
)
from shared.wire.schemas import ModelCard, ModelList, WorkerHealth
from shared.wire.worker_auth import WorkerKeyMiddleware

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
E2E_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class EmbeddingWorkerMetrics:
    """vLLM's names where vLLM has one (prompt tokens, request latency, running/waiting), plus the batch size."""

    def __init__(self, model: str, batcher_state: MicroBatcher | None = None) -> None:
        self.registry = CollectorRegistry()
        self.model = model
        labels = ["model_name"]
        self.prompt_tokens = Counter(names.PROMPT_TOKENS, "Prefill tokens processed.", labels, registry=self.registry)
        self.e2e = Histogram(
            names.E2E_REQUEST_LATENCY, "End-to-end request latency.", labels, buckets=E2E_BUCKETS,
            registry=self.registry,
        )  # fmt: skip
        self.request_success = Counter(
            names.REQUEST_SUCCESS, "Finished requests.", [*labels, "finished_reason"], registry=self.registry
        )
        self.batch_inputs = Histogram(
            "fleetchat_worker_embedding_batch_inputs", "Inputs per forward pass (the micro-batcher's batches).",
            labels, buckets=BATCH_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.batch_requests = Histogram(
            "fleetchat_worker_embedding_batch_requests", "Requests sharing one forward pass.",
            labels, buckets=BATCH_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.running = Gauge(names.NUM_REQUESTS_RUNNING, "Inputs in the forward pass.", labels, registry=self.registry)
        self.waiting = Gauge(names.NUM_REQUESTS_WAITING, "Requests queued.", labels, registry=self.registry)

    def observe_batch(self, requests: int, inputs: int) -> None:
        self.batch_requests.labels(self.model).observe(requests)
        self.batch_inputs.labels(self.model).observe(inputs)


def create_embedding_app(
    pool: EmbeddingPool,
    encode: Encode,
    *,
    max_batch_inputs: int = 64,
    max_wait_s: float = 0.002,
    accepted_keys: frozenset[str] = frozenset(),
    max_body_bytes: int = 32 * 1_048_576,
    rerank_pools: tuple[RerankPool, ...] = (),
) -> FastAPI:
    metrics = EmbeddingWorkerMetrics(pool.name)
    batcher = MicroBatcher(encode, max_batch_inputs=max_batch_inputs, max_wait_s=max_wait_s,
                           observe=metrics.observe_batch)  # fmt: skip

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        try:
            yield
        finally:
            await batcher.stop()

    app = FastAPI(title=f"fleetchat embedding worker ({pool.name})", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=max_body_bytes)
    app.add_middleware(WorkerKeyMiddleware, keys=accepted_keys)  # added last: runs first
    install_error_handlers(app)
    app.state.batcher = batcher

    @app.post("/v1/embeddings")
    async def embeddings(body: EmbeddingRequest) -> JSONResponse:
        started = time.perf_counter()
        if body.model != pool.name:
            raise ModelNotFoundError(f"The model `{body.model}` does not exist.", param="model")
        texts, counts = checked_inputs(pool, body)
        vectors = await batcher.embed(texts)
        data = [
            Embedding(index=i, embedding=encode_vector(vector, body.encoding_format))
            for i, vector in enumerate(vectors)
        ]
        tokens = sum(counts)
        metrics.prompt_tokens.labels(pool.name).inc(tokens)
        metrics.request_success.labels(pool.name, "stop").inc()
        metrics.e2e.labels(pool.name).observe(time.perf_counter() - started)
        usage = EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens)
        return JSONResponse(EmbeddingResponse(data=data, model=pool.name, usage=usage).model_dump())

    reranker = FusedReranker(batcher.embed)
    rerank_by_name = {rerank.name: rerank for rerank in rerank_pools}

    @app.post("/v1/rerank")
    @app.post("/v2/rerank")
    @app.post("/rerank")
    async def rerank(body: WorkerRerankRequest) -> JSONResponse:
        started = time.perf_counter()
        rerank_pool = rerank_by_name.get(body.model or "")
        if rerank_pool is None:
            raise ModelNotFoundError(f"The model `{body.model}` does not exist.", param="model")
        counts = checked_worker_pairs(rerank_pool, body.query, body.documents)
        scores = await reranker.scores(body.query, body.documents)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        top = order[: body.top_n] if body.top_n > 0 else order
        results = [
            WorkerRerankResult(index=i, relevance_score=scores[i], document=RerankDocument(text=body.documents[i]))
            for i in top
        ]
        tokens = sum(counts)
        metrics.prompt_tokens.labels(rerank_pool.name).inc(tokens)
        metrics.request_success.labels(rerank_pool.name, "stop").inc()
        metrics.e2e.labels(rerank_pool.name).observe(time.perf_counter() - started)
        answer = WorkerRerankResponse(
            id=f"rerank-{uuid.uuid4().hex}", model=rerank_pool.name, usage=WorkerRerankUsage(total_tokens=tokens),
            results=results,
        )  # fmt: skip
        return JSONResponse(answer.model_dump(exclude_none=True))

    @app.get("/v1/models")
    async def models() -> ModelList:
        cards = [ModelCard(id=pool.name, max_model_len=pool.max_input_tokens)]
        cards += [ModelCard(id=r.name, max_model_len=r.max_pair_tokens) for r in rerank_pools]
        return ModelList(data=cards)

    @app.get("/health")
    async def health() -> WorkerHealth:
        return WorkerHealth(status="ok", model=pool.name, max_model_len=pool.max_input_tokens)

    @app.get("/metrics")
    async def prometheus() -> Response:
        metrics.running.labels(pool.name).set(batcher.running)
        metrics.waiting.labels(pool.name).set(batcher.waiting)
        return Response(generate_latest(metrics.registry), media_type=PROMETHEUS_CONTENT_TYPE)

    return app


def run_embedding_worker(
    pool_name: str,
    host: str,
    port: int,
    *,
    max_batch_inputs: int,
    max_wait_s: float,
    threads: int | None = None,
    log_level: str = "warning",
    rerank_pools: tuple[str, ...] = (),
) -> None:
    """Load the pool's packaged model and serve it until stopped (`fleetchat embedding-worker`), and the fused rank
    of the named re-rank pools (each must name this embedding pool as its local worker)."""
    from gpu_workers.embeddings.encoder import SentenceEncoder
    from shared.operator_config import install_from_environment
    from shared.settings import Settings

    install_from_environment()  # FLEETCHAT_CONFIG_FILE's embedding pools
    accepted = Settings().worker.accepted_keys()  # the process's entry point: FLEETCHAT_WORKER_API_KEY(S)
    pool = get_embedding_pool(pool_name)
    if pool is None:
        raise SystemExit(f"unknown embedding pool {pool_name!r}")
    reranks = tuple(tables().rerank_pools[name] for name in rerank_pools if name in tables().rerank_pools)
    if len(reranks) != len(rerank_pools) or any(r.local.embedding_pool != pool.name for r in reranks):
        raise SystemExit(f"re-rank pools {list(rerank_pools)} are not all served locally by {pool.name!r}")
    encoder = SentenceEncoder(pool.local.directory(), chunk_inputs=max(max_batch_inputs, 1), threads=threads)
    app = create_embedding_app(
        pool, encoder.encode, accepted_keys=accepted, max_batch_inputs=max_batch_inputs, max_wait_s=max_wait_s,
        rerank_pools=reranks,
    )  # fmt: skip
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5)

"""The embedding worker's HTTP app: OpenAI `/v1/embeddings`, `/v1/models`, `/health` and Prometheus `/metrics` — what
`vllm serve --runner pooling` exposes for an embedding model, so the gateway cannot tell the two apart.

Inputs are checked as the gateway checks them (shared/fleet/embedding_pools.py: a 400 for what the model cannot take),
then embedded by the micro-batcher (gpu_workers/embeddings/batcher.py), which shares forward passes between requests.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gpu_workers.embeddings.batcher import Encode, MicroBatcher
from shared import metric_names as names
from shared.errors import ModelNotFoundError
from shared.fleet.embedding_pools import EmbeddingPool, checked_inputs
from shared.fleet.tables import get_embedding_pool
from shared.wire.embeddings_api import Embedding, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage, encode_vector
from shared.wire.http_errors import BodySizeLimitMiddleware, install_error_handlers
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

    @app.get("/v1/models")
    async def models() -> ModelList:
        return ModelList(data=[ModelCard(id=pool.name, max_model_len=pool.max_input_tokens)])

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
) -> None:
    """Load the pool's packaged model and serve it until stopped (`fleetchat embedding-worker`)."""
    from gpu_workers.embeddings.encoder import SentenceEncoder
    from shared.operator_config import install_from_environment
    from shared.settings import Settings

    install_from_environment()  # FLEETCHAT_CONFIG_FILE's embedding pools
    accepted = Settings().worker.accepted_keys()  # the process's entry point: FLEETCHAT_WORKER_API_KEY(S)
    pool = get_embedding_pool(pool_name)
    if pool is None:
        raise SystemExit(f"unknown embedding pool {pool_name!r}")
    encoder = SentenceEncoder(pool.local.directory(), chunk_inputs=max(max_batch_inputs, 1), threads=threads)
    app = create_embedding_app(
        pool, encoder.encode, accepted_keys=accepted, max_batch_inputs=max_batch_inputs, max_wait_s=max_wait_s
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5)

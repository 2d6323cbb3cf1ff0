"""The worker's HTTP app: OpenAI chat completions and completions, `/tokenize` and `/detokenize`, `/v1/models`,
`/health`, Prometheus `/metrics` — what `vllm serve` exposes, so the gateway cannot tell the two apart."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from gpu_workers.engine import Engine
from gpu_workers.server.chat_serving import ChatServing, completion_body
from gpu_workers.server.completion_serving import CompletionServing
from gpu_workers.server.metrics import WorkerMetrics
from shared.errors import InvalidRequestError, ModelNotFoundError
from shared.wire.completions_api import (
    CompletionRequest,
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
    TokenizerInfo,
)
from shared.wire.http_errors import BodySizeLimitMiddleware, install_error_handlers
from shared.wire.openai_shape import with_required_nulls
from shared.wire.schemas import ChatCompletionRequest, ModelCard, ModelList, WorkerHealth
from shared.wire.worker_auth import WorkerKeyMiddleware

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def create_worker_app(
    engine: Engine, *, accepted_keys: frozenset[str] = frozenset(), max_body_bytes: int = 8 * 1_048_576
) -> FastAPI:
    """The worker's app; it answers only requests presenting one of `accepted_keys` (none: anyone)."""
    metrics = WorkerMetrics(engine)
    serving = ChatServing(engine, metrics)
    completions = CompletionServing(engine, metrics)
    app = FastAPI(title=f"fleetchat worker ({engine.model_name})", docs_url=None, redoc_url=None)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=max_body_bytes)
    app.add_middleware(WorkerKeyMiddleware, keys=accepted_keys)  # added last: runs first
    install_error_handlers(app)
    app.state.engine = engine

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatCompletionRequest, raw: Request) -> Response:
        prepared = serving.prepare(body)
        if body.stream:
            options = body.stream_options
            include_usage = bool(options and options.include_usage)
            continuous = bool(options and options.include_usage and options.continuous_usage_stats)
            return StreamingResponse(
                serving.stream(prepared, include_usage, continuous_usage=continuous), media_type="text/event-stream"
            )
        completion = await serving.complete(prepared, raw.is_disconnected)
        if completion is None:  # the client left; nobody reads this (nginx's "client closed request")
            return Response(status_code=499)
        return JSONResponse(completion_body(completion))

    @app.post("/v1/completions", response_model=None)
    async def text_completions(body: CompletionRequest) -> Response:
        extra = sorted(body.model_extra or {})
        if extra:
            raise InvalidRequestError(f"Unrecognized request argument supplied: {extra[0]}", param=extra[0])
        prompts = completions.prepare(body)
        if body.stream:
            options = body.stream_options
            include_usage = bool(options and options.include_usage)
            continuous = bool(options and options.include_usage and options.continuous_usage_stats)
            events = completions.stream(
                prompts, include_usage, want_logprobs=body.logprobs is not None, continuous_usage=continuous
            )
            return StreamingResponse(events, media_type="text/event-stream")
        completion = await completions.complete(prompts, want_logprobs=body.logprobs is not None)
        return JSONResponse(with_required_nulls(completion.model_dump(exclude_none=True)))

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest) -> TokenizeResponse:
        _same_model(body.model)
        tokens = engine.tokenize(body.prompt, add_special_tokens=body.add_special_tokens)
        pieces = engine.token_strs(tokens) if body.return_token_strs else None
        return TokenizeResponse(tokens=tokens, count=len(tokens), max_model_len=engine.max_model_len, token_strs=pieces)

    @app.get("/tokenizer_info")
    async def tokenizer_info() -> TokenizerInfo:
        return TokenizerInfo(**engine.tokenizer_info(), model_max_length=engine.max_model_len)

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest) -> DetokenizeResponse:
        _same_model(body.model)
        if any(t >= engine.vocab_size for t in body.tokens):
            raise InvalidRequestError("a token id is out of vocabulary", param="tokens")
        return DetokenizeResponse(prompt=engine.decode(body.tokens))

    def _same_model(model: str | None) -> None:
        if model is not None and model != engine.model_name:
            raise ModelNotFoundError(f"The model `{model}` does not exist.", param="model")

    @app.get("/v1/models")
    async def models() -> ModelList:
        return ModelList(data=[ModelCard(id=engine.model_name, max_model_len=engine.max_model_len)])

    @app.get("/health")
    async def health() -> WorkerHealth:
        return WorkerHealth(status="ok", model=engine.model_name, max_model_len=engine.max_model_len)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=PROMETHEUS_CONTENT_TYPE)

    return app

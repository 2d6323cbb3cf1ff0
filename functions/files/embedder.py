"""Embeddings for ingestion and search, through the gateway's own embedding service (functions/embedding_service.py):
admitted against the tenant's limits and metered on the embedding meter like any `/v1/embeddings` call.

Ingestion is background work, so it waits out a 429 (the `retry-after` the limiter names) and retries a failed
worker a few times, instead of failing a file that the next minute would index.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np

from functions.accounts.auth import Caller
from functions.embedding_service import EmbeddingService
from shared.errors import QuotaExceededError, RateLimitError, ServiceUnavailableError, UpstreamError
from shared.fleet.embedding_pools import packaged_tokenizer
from shared.fleet.tables import get_embedding_pool, tables
from shared.wire.embeddings_api import EmbeddingRequest, decode_vector

BATCH = 64  # inputs per embedding request: one request per 64 chunks, within OpenAI's 2048
ATTEMPTS = 4  # a worker failure is retried this many times before the file fails
WAIT_LIMIT_S = 600.0  # waiting out rate limits for longer than this fails the file (a server_error, retryable)


class Embedder:
    def __init__(self, service: EmbeddingService, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.service = service
        self.sleep = sleep

    def token_spans(self, model: str) -> Callable[[str], list[tuple[int, int]]]:
        """Character spans of a text's tokens under the model's own tokenizer (special tokens left out)."""
        tokenizer = packaged_tokenizer(tables().embedding_pools[model].local.directory())

        def spans(text: str) -> list[tuple[int, int]]:
            encoding = tokenizer.encode(text, add_special_tokens=False)
            return [tuple(offset) for offset in encoding.offsets]

        return spans

    def max_input_tokens(self, model: str) -> int:
        pool = get_embedding_pool(model)
        return 256 if pool is None else pool.max_input_tokens

    async def embed(self, caller: Caller, model: str, texts: list[str]) -> np.ndarray:
        """One float32 row per text, in order (a single request: at most BATCH texts)."""
        request = EmbeddingRequest(model=model, input=texts, encoding_format="base64")
        response, _ = await self.service.embed(caller, request)
        return np.stack([decode_vector(item["embedding"]) for item in response["data"]])

    async def embed_patiently(self, caller: Caller, model: str, texts: list[str]) -> np.ndarray:
        """`embed`, waiting out rate limits and retrying worker failures (background work has time)."""
        waited, failures = 0.0, 0
        while True:
            try:
                return await self.embed(caller, model, texts)
            except QuotaExceededError:
                raise
            except RateLimitError as exc:
                pause = float(exc.headers.get("retry-after", "1"))
                waited += pause
                if waited > WAIT_LIMIT_S:
                    raise
                await self.sleep(pause)
            except (UpstreamError, ServiceUnavailableError):
                failures += 1
                if failures >= ATTEMPTS:
                    raise
                await self.sleep(min(2.0**failures, 10.0))

"""The chat-completions path through the gateway: route to a pool and replica, call the worker, relay the answer."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from functions.admission import prompt_token_bound
from functions.gateway_metrics import GatewayMetrics
from functions.routing import PoolRouter, pools_for_tier, resolve_pool
from functions.worker_client import UpstreamStream, WorkerClient
from shared.schemas import ChatCompletionRequest
from shared.storage.base import Tenant

# The design's deployed sticky-replica hint, forwarded as-is (workers that do not know it ignore it).
MODAL_SESSION_HEADER = "Modal-Session-ID"

# Extension fields the gateway reads itself; workers (and vLLM) never see them.
GATEWAY_ONLY_FIELDS = frozenset({"conversation_id", "session_id", "store", "replace_from"})


@dataclass
class RoutedRequest:
    pool: str
    replicas: list[str]
    body: dict[str, Any]
    headers: dict[str, str]


class ChatService:
    def __init__(self, router: PoolRouter, workers: WorkerClient, metrics: GatewayMetrics) -> None:
        self.router = router
        self.workers = workers
        self.metrics = metrics

    def pool_for(self, tenant: Tenant, request: ChatCompletionRequest) -> str:
        """The pool serving the requested model for this tenant's tier (404 model_not_found otherwise)."""
        return resolve_pool(tenant.tier, request.model, self.router.pools)

    def fallback(
        self,
        tenant: Tenant,
        pool: str,
        request: ChatCompletionRequest,
        asked_max_tokens: int | None,
        context_tokens: dict[str, int],
    ) -> tuple[str, ChatCompletionRequest] | None:
        """The tier's next pool (the tier table lists them best first) and the request as it would send it there,
        for when `pool` has no reachable replica; None when there is none or the request cannot fit its context.
        The response always names the fallback (never a silent downgrade)."""
        allowed = pools_for_tier(tenant.tier, self.router.pools)
        later = allowed[allowed.index(pool) + 1 :] if pool in allowed else []
        if not later:
            return None
        room = context_tokens.get(later[0], 0) - prompt_token_bound(request.messages)
        max_tokens = request.max_tokens
        if max_tokens is not None and max_tokens > room:
            if asked_max_tokens is not None:
                return None  # the client's own budget does not fit the smaller model: the 503 stands
            max_tokens = None  # the gateway's budget: let the worker bound the answer by its context instead
        if room <= 0:
            return None
        return later[0], request.model_copy(update={"model": later[0], "max_tokens": max_tokens})

    def route(self, pool: str, request: ChatCompletionRequest, session_id: str | None) -> RoutedRequest:
        body = request.model_dump(exclude_none=True, exclude=set(GATEWAY_ONLY_FIELDS))
        if request.stream:
            # Always ask the worker for usage, on every chunk: the gateway bills real token counts, aborts included,
            # whatever the client asked for (StreamCapture gives the client OpenAI's shape).
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        headers = {MODAL_SESSION_HEADER: session_id} if session_id else {}
        return RoutedRequest(pool, self.router.candidates(pool, session_id), body, headers)

    @contextlib.contextmanager
    def _observed(self, pool: str) -> Iterator[None]:
        """Time the worker's answer (headers for a stream, the whole body otherwise); requests are counted by status
        where the response leaves the gateway (functions/http_metrics.py), whatever refused or answered them."""
        start = time.perf_counter()
        yield
        self.metrics.upstream_ttfb.labels(pool).observe(time.perf_counter() - start)

    async def complete(self, routed: RoutedRequest) -> dict[str, Any]:
        with self._observed(routed.pool):
            return await self.workers.complete(routed.replicas, routed.body, routed.headers)

    async def open_stream(self, routed: RoutedRequest) -> UpstreamStream:
        with self._observed(routed.pool):
            return await self.workers.open_stream(routed.replicas, routed.body, routed.headers)

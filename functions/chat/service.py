"""The chat-completions path through the gateway: route to a pool and replica, call the worker, relay the answer
(continued on another replica if its replica dies mid-stream: functions/chat/streams/continuation.py)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from functions.chat.images import count_images
from functions.chat.streams.continuation import MODAL_SESSION_HEADER, ContinuingStream, Leg
from functions.control.admission import prompt_messages, prompt_token_bound
from functions.control.replica_breakers import ReplicaBreakers
from functions.control.routing import PoolRouter, pools_for_tier, resolve_pool
from functions.metrics.failover import FailoverMetrics
from functions.metrics.gateway import GatewayMetrics
from functions.worker_client import UpstreamPolicy, WorkerClient
from shared.errors import InvalidRequestError
from shared.fleet.pools import reasons, sees
from shared.fleet.tables import get_pool
from shared.settings import Settings
from shared.storage.accounts import Tenant
from shared.wire.schemas import ChatCompletionRequest

# Extension fields the gateway reads itself; workers (and vLLM) never see them.
GATEWAY_ONLY_FIELDS = frozenset(
    {"conversation_id", "store", "replace_from", "parent_message_id", "prompt_cache_key", "safety_identifier"}
    | {"server_tools"}
    | {"vector_store_ids", "file_search"}  # retrieval (functions/retrieval): the gateway searches, workers never do
)


# Where a request goes (its pool, candidate replicas, worker body and headers): the same thing as a continuation's leg.
RoutedRequest = Leg


class ChatService:
    def __init__(
        self,
        router: PoolRouter,
        workers: WorkerClient,
        metrics: GatewayMetrics,
        *,
        failover: FailoverMetrics | None = None,
        max_continuations: int = 2,
        deployed: bool = False,
    ) -> None:
        self.deployed = deployed  # which of a pool's models serves it (shared/fleet/pools.py: reasons)
        self.router = router
        self.workers = workers
        self.metrics = metrics
        self.failover = failover
        self.max_continuations = max_continuations

    def pool_for(self, tenant: Tenant, request: ChatCompletionRequest) -> str:
        """The pool serving the requested model for this tenant's tier (404 model_not_found otherwise)."""
        return resolve_pool(tenant.tier, request.model, self.router.pools)

    def check_reasoning(self, pool: str, request: ChatCompletionRequest, *, param: str = "reasoning_effort") -> None:
        """A 400 for a reasoning effort asked of a pool whose model does not reason (`none` asks for no reasoning)."""
        if request.reasoning_effort in (None, "none") or reasons(get_pool(pool), deployed=self.deployed):
            return
        raise InvalidRequestError(
            f"'{param}' is not supported with model '{pool}': its model does not reason.",
            param=param,
            code="unsupported_parameter",
        )

    def check_images(self, tenant: Tenant, pool: str, request: ChatCompletionRequest) -> None:
        """A 400 for images sent to a pool whose model does not see (naming the tier's models that do), or more than
        its model takes in one prompt (the stored conversation's images count: every turn sends them again)."""
        count = count_images(request.messages)
        if count == 0:
            return
        model = get_pool(pool)
        if not sees(model, deployed=self.deployed):
            allowed = pools_for_tier(tenant.tier, self.router.pools)
            seeing = [name for name in allowed if sees(get_pool(name), deployed=self.deployed)]
            also = f" Models that do here: {', '.join(seeing)}." if seeing else " No model here does."
            raise InvalidRequestError(
                f"The model '{pool}' does not take images (`image_url` content parts).{also}",
                param="messages",
                code="image_input_unsupported",
            )
        assert model is not None
        if count > model.deployed.max_images_per_prompt:
            raise InvalidRequestError(
                f"The conversation has {count} images; the model '{pool}' takes at most "
                f"{model.deployed.max_images_per_prompt} in one prompt.",
                param="messages",
                code="too_many_images",
            )

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
        if count_images(request.messages):  # images go only where they are seen, never to a text model
            later = [name for name in later if sees(get_pool(name), deployed=self.deployed)]
        if not later:
            return None
        room = context_tokens.get(later[0], 0) - prompt_token_bound(prompt_messages(request))
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
        where the response leaves the gateway (functions/api/http_metrics.py), whatever refused or answered them."""
        start = time.perf_counter()
        yield
        self.metrics.upstream_ttfb.labels(pool).observe(time.perf_counter() - start)

    async def complete(self, routed: RoutedRequest) -> dict[str, Any]:
        with self._observed(routed.pool):
            return await self.workers.complete(routed.pool, routed.replicas, routed.body, routed.headers)

    async def open_stream(
        self,
        routed: RoutedRequest,
        fallback: Callable[[], RoutedRequest | None] | None = None,
        *,
        continuations: int | None = None,
    ) -> ContinuingStream:
        """The worker's stream, continued on another replica (or `fallback()`'s pool) if its replica dies (at most
        `continuations` times: the service's setting by default)."""
        with self._observed(routed.pool):
            first = await self.workers.open_stream(routed.pool, routed.replicas, routed.body, routed.headers)

        return ContinuingStream(
            first,
            routed,
            self.workers,
            max_continuations=self.max_continuations if continuations is None else continuations,
            fallback=fallback,
            metrics=self.failover,
        )


def chat_service_for(
    settings: Settings, worker_urls: dict[str, list[str]], client: httpx.AsyncClient, metrics: GatewayMetrics
) -> ChatService:
    """The gateway's chat service with its replica breakers, retry policy and failover metrics from `settings`."""
    failover = FailoverMetrics(metrics.registry)
    breakers = ReplicaBreakers(
        worker_urls,
        threshold=settings.breaker.failure_threshold,
        cooldown_s=settings.breaker.cooldown_s,
        metrics=failover,
    )
    policy = UpstreamPolicy.of(settings.worker, settings.upstream)
    workers = WorkerClient(client, breakers, policy, failover, balanced=settings.worker.balanced)
    router = PoolRouter(worker_urls, breakers)
    return ChatService(
        router, workers, metrics, failover=failover, max_continuations=settings.max_continuations,
        deployed=settings.environment == "deployed",
    )  # fmt: skip

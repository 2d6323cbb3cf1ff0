"""Fallback to the tier's next pool: only where the tier has one, and only with a request that fits its context."""

from __future__ import annotations

from datetime import UTC, datetime

from functions.chat.service import ChatService
from functions.control.routing import PoolRouter
from functions.metrics.gateway import GatewayMetrics
from functions.worker_client import WorkerClient
from shared.fleet.tiers import Tier
from shared.storage.accounts import Tenant
from shared.wire.schemas import ChatCompletionRequest, ChatMessage

CONTEXTS = {"flagship": 32_768, "mini": 8_192}


def _service() -> ChatService:
    router = PoolRouter({"flagship": ["http://127.0.0.1:1"], "mini": ["http://127.0.0.1:2"]})
    return ChatService(router, WorkerClient(None), GatewayMetrics())  # type: ignore[arg-type]


def _tenant(tier: Tier) -> Tenant:
    return Tenant(id="ten_x", name="x", tier=tier, created_at=datetime(2026, 1, 1, tzinfo=UTC))


def _request(max_tokens: int | None, words: int = 10) -> ChatCompletionRequest:
    return ChatCompletionRequest(
        model="flagship", messages=[ChatMessage(role="user", content="word " * words)], max_tokens=max_tokens
    )


def test_plus_falls_back_from_flagship_to_mini_with_the_model_renamed() -> None:
    pool, body = _service().fallback(_tenant(Tier.PLUS), "flagship", _request(256), 256, CONTEXTS) or (None, None)
    assert pool == "mini" and body is not None and body.model == "mini" and body.max_tokens == 256


def test_a_tier_without_another_pool_has_no_fallback() -> None:
    assert _service().fallback(_tenant(Tier.FREE), "mini", _request(256), 256, CONTEXTS) is None
    assert _service().fallback(_tenant(Tier.PLUS), "mini", _request(256), 256, CONTEXTS) is None  # mini is last


def test_the_gateways_own_budget_is_dropped_where_it_does_not_fit_the_smaller_model() -> None:
    # The client asked for nothing; admission's 4,096 budget fitted flagship but not mini next to a long prompt.
    result = _service().fallback(_tenant(Tier.PLUS), "flagship", _request(4096, words=1000), None, CONTEXTS)
    assert result is not None and result[1].max_tokens is None


def test_a_clients_own_budget_that_does_not_fit_keeps_the_503() -> None:
    assert _service().fallback(_tenant(Tier.PLUS), "flagship", _request(6000, words=1000), 6000, CONTEXTS) is None


def test_a_prompt_longer_than_the_fallback_context_keeps_the_503() -> None:
    assert _service().fallback(_tenant(Tier.PLUS), "flagship", _request(None, words=20_000), None, CONTEXTS) is None

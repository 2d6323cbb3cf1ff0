"""`GET /v1/models`: every model the caller may use: the chat pools of its tier, each with its context, capabilities,
the model version behind it and its list prices (where the operator set them), the embedding and re-rank models, and
the guard
that answers `/v1/moderations`."""

from __future__ import annotations

from fastapi import APIRouter

from functions.accounts.auth import CurrentTenant
from functions.api.deps import (
    AccountingDep,
    ChatServiceDep,
    EmbeddingServiceDep,
    ModerationServiceDep,
    RerankServiceDep,
    SettingsDep,
)
from functions.control.routing import pools_for_tier
from shared.fleet.pools import model_version, reasons, sees
from shared.fleet.tables import get_embedding_pool, get_pool, get_rerank_pool, list_price
from shared.wire.schemas import ModelCapabilities, ModelCard, ModelList

router = APIRouter(prefix="/v1", tags=["models"])

# What every chat pool answers: the local engine and vLLM alike (docs/api-parameters.md, docs/completions.md).
CHAT = ModelCapabilities(
    chat_completions=True, responses=True, completions=True, tools=True, structured_output=True, logprobs=True
)


def _card(name: str, deployed: bool, context_tokens: dict[str, int]) -> ModelCard:
    pool = get_pool(name)
    return ModelCard(
        id=name,
        model_version=None if pool is None else model_version(pool, deployed=deployed),
        max_model_len=context_tokens.get(name),
        capabilities=CHAT.model_copy(
            update={"reasoning": reasons(pool, deployed=deployed), "vision": sees(pool, deployed=deployed)}
        ),
        pricing=list_price(name),
    )


def _embedding_card(name: str) -> ModelCard | None:
    pool = get_embedding_pool(name)
    if pool is None:
        return None
    capabilities = ModelCapabilities(embeddings=True)
    return ModelCard(
        id=name,
        max_model_len=pool.max_input_tokens,
        capabilities=capabilities,
        dimensions=pool.dimensions,
        pricing=pool.list_price,
    )


def _rerank_card(name: str) -> ModelCard | None:
    pool = get_rerank_pool(name)
    if pool is None:
        return None
    return ModelCard(
        id=name,
        max_model_len=pool.max_pair_tokens,
        capabilities=ModelCapabilities(rerank=True),
        pricing=pool.list_price,
    )


@router.get("/models")
async def list_models(
    tenant: CurrentTenant,
    chat: ChatServiceDep,
    embeddings: EmbeddingServiceDep,
    moderation: ModerationServiceDep,
    rerank: RerankServiceDep,
    accounting: AccountingDep,
    settings: SettingsDep,
) -> ModelList:
    deployed = settings.environment == "deployed"
    contexts = accounting.admission.context_tokens
    cards = [_card(pool, deployed, contexts) for pool in pools_for_tier(tenant.tier, chat.router.pools)]
    cards += [card for name in embeddings.router.pools if (card := _embedding_card(name)) is not None]
    cards += [card for name in rerank.router.pools if (card := _rerank_card(name)) is not None]
    cards.append(ModelCard(id=moderation.guard.name, capabilities=ModelCapabilities(moderations=True)))
    return ModelList(data=cards)

"""`GET /v1/models`: the pools the caller's tier may use, each with the model version behind it."""

from __future__ import annotations

from fastapi import APIRouter

from functions.accounts.auth import CurrentTenant
from functions.api.deps import ChatServiceDep, SettingsDep
from functions.control.routing import pools_for_tier
from shared.fleet.pools import model_version
from shared.fleet.tables import get_pool
from shared.wire.schemas import ModelCard, ModelList

router = APIRouter(prefix="/v1", tags=["models"])


def _card(name: str, deployed: bool) -> ModelCard:
    pool = get_pool(name)
    return ModelCard(id=name, model_version=None if pool is None else model_version(pool, deployed=deployed))


@router.get("/models")
async def list_models(tenant: CurrentTenant, chat: ChatServiceDep, settings: SettingsDep) -> ModelList:
    served = chat.router.pools
    deployed = settings.environment == "deployed"
    return ModelList(data=[_card(pool, deployed) for pool in pools_for_tier(tenant.tier, served)])

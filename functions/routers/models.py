"""`GET /v1/models`: the pools the caller's tier may use."""

from __future__ import annotations

from fastapi import APIRouter, Request

from functions.auth import CurrentTenant
from functions.routing import pools_for_tier
from shared.schemas import ModelCard, ModelList

router = APIRouter(prefix="/v1", tags=["models"])


@router.get("/models")
async def list_models(tenant: CurrentTenant, request: Request) -> ModelList:
    served = request.app.state.chat.router.pools
    return ModelList(data=[ModelCard(id=pool) for pool in pools_for_tier(tenant.tier, served)])

"""`POST /v1/rerank` (and `/v2/rerank`, Cohere's v2 path): a query's documents ordered by relevance, in the shape
Cohere, Jina and vLLM share (authenticated, rate-limited and metered on the re-rank meter)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from functions.accounts.auth import CurrentCaller
from functions.api.deps import RerankServiceDep
from functions.api.openapi_description import error_responses
from shared.wire.rerank_api import RerankRequest, RerankResponse

router = APIRouter(tags=["rerank"])
RESPONSES = error_responses(404, 429, 502, 503)


@router.post("/v1/rerank", response_model=RerankResponse, responses=RESPONSES)
async def create_rerank(body: RerankRequest, caller: CurrentCaller, service: RerankServiceDep) -> JSONResponse:
    response, headers = await service.rerank(caller, body)
    return JSONResponse(response, headers=headers)


@router.post("/v2/rerank", response_model=RerankResponse, responses=RESPONSES)
async def create_rerank_v2(body: RerankRequest, caller: CurrentCaller, service: RerankServiceDep) -> JSONResponse:
    """Cohere's v2 path (its ClientV2), the same operation."""
    response, headers = await service.rerank(caller, body)
    return JSONResponse(response, headers=headers)

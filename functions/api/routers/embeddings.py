"""`POST /v1/embeddings`: OpenAI-compatible embeddings (authenticated, rate-limited and metered on their own meter)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from functions.accounts.auth import CurrentCaller
from functions.api.deps import EmbeddingServiceDep
from functions.api.openapi_description import error_responses
from shared.wire.embeddings_api import EmbeddingRequest, EmbeddingResponse

router = APIRouter(prefix="/v1", tags=["embeddings"])


@router.post("/embeddings", response_model=EmbeddingResponse, responses=error_responses(404, 429, 502, 503))
async def create_embeddings(
    body: EmbeddingRequest, caller: CurrentCaller, service: EmbeddingServiceDep
) -> JSONResponse:
    response, headers = await service.embed(caller, body)
    return JSONResponse(response, headers=headers)

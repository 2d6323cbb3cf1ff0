"""`POST /v1/moderations`: OpenAI-compatible moderation with the deployment's guard (authenticated, rate-limited and
metered like chat)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from functions.accounts.auth import CurrentCaller
from functions.api.deps import ModerationServiceDep
from functions.api.openapi_description import error_responses
from shared.wire.moderation_api import ModerationRequest, ModerationResponse

router = APIRouter(prefix="/v1", tags=["moderations"])


@router.post("/moderations", response_model=ModerationResponse, responses=error_responses(429, 503))
async def create_moderation(
    body: ModerationRequest, caller: CurrentCaller, service: ModerationServiceDep
) -> JSONResponse:
    response, headers = await service.moderate(caller, body)
    return JSONResponse(response.model_dump(), headers=headers)

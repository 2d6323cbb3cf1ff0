"""`POST /v1/moderations`: OpenAI-compatible moderation with the deployment's guard (authenticated, rate-limited and
metered like chat)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from functions.accounts.auth import CurrentCaller
from functions.api.openapi_description import error_responses
from functions.safety.moderation_service import ModerationService
from shared.wire.moderation_api import ModerationRequest, ModerationResponse

router = APIRouter(prefix="/v1", tags=["moderations"])


@router.post("/moderations", response_model=ModerationResponse, responses=error_responses(429, 503))
async def create_moderation(body: ModerationRequest, caller: CurrentCaller, request: Request) -> JSONResponse:
    service: ModerationService = request.app.state.moderation
    response, headers = await service.moderate(caller, body)
    return JSONResponse(response.model_dump(), headers=headers)

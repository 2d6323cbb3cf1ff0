"""vLLM's tokenizer endpoints on the gateway (`POST /tokenize`, `POST /detokenize`, `GET /tokenizer_info`), answered
by one of the model's workers: what lm-evaluation-harness's remote tokenizer and vLLM's own clients call. A key is
needed; nothing is billed."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from functions.accounts.auth import CurrentCaller
from functions.api.deps import CompletionsServiceDep
from functions.api.openapi_description import error_responses
from shared.wire.completions_api import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
    TokenizerInfo,
)

router = APIRouter(tags=["tokenizer"])


@router.post("/tokenize", responses=error_responses(404, 502, 503))
async def tokenize(body: TokenizeRequest, caller: CurrentCaller, service: CompletionsServiceDep) -> TokenizeResponse:
    sent = body.model_dump(exclude={"model"})
    return TokenizeResponse.model_validate(await service.tokenizer(caller, body.model, "/tokenize", sent))


@router.post("/detokenize", responses=error_responses(404, 502, 503))
async def detokenize(
    body: DetokenizeRequest, caller: CurrentCaller, service: CompletionsServiceDep
) -> DetokenizeResponse:
    sent = body.model_dump(exclude={"model"})
    return DetokenizeResponse.model_validate(await service.tokenizer(caller, body.model, "/detokenize", sent))


@router.get("/tokenizer_info", responses=error_responses(404, 502, 503))
async def tokenizer_info(
    caller: CurrentCaller,
    service: CompletionsServiceDep,
    model: Annotated[str | None, Query(max_length=256)] = None,
) -> TokenizerInfo:
    return TokenizerInfo.model_validate(await service.tokenizer(caller, model, "/tokenizer_info", None))

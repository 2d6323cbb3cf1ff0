"""One line of a batch, run in-process through the same service as its endpoint (the chat pipeline, the Responses
service, embeddings, completions): the same auth, limits, safety and metering as over HTTP, under a request id fixed
by the batch and the line, at the batch price (functions/control/request_accounting.billed_as_batch_line).

The answer is what the endpoint would have sent: a 200 with its JSON body, or its status with OpenAI's error object."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from functions.accounts.auth import Caller
from functions.chat.delivery import StreamAnswer
from functions.chat.pipeline import ChatCall, ChatPipeline
from functions.completions.service import CompletionsService
from functions.control.batch_lines import billed_as_batch_line
from functions.embedding_service import EmbeddingService
from functions.responses.service import ResponseCall, ResponsesService
from functions.safety.moderation_service import ModerationService
from shared.errors import FleetchatError, InvalidRequestError
from shared.wire.completions_api import CompletionRequest
from shared.wire.embeddings_api import EmbeddingRequest
from shared.wire.http_errors import validation_to_error
from shared.wire.moderation_api import ModerationRequest
from shared.wire.openai_shape import with_required_nulls
from shared.wire.responses_api import ResponsesRequest
from shared.wire.schemas import ChatCompletionRequest


@dataclass(frozen=True)
class LineAnswer:
    status_code: int
    body: dict[str, Any]
    error: FleetchatError | None = None  # the error behind a non-200 (its retry-after, for the runner)

    @property
    def usage(self) -> tuple[int, int, int]:
        """(input, cached input, output) tokens of a 200, by the endpoint's usage shape; zeros otherwise."""
        usage = self.body.get("usage") if self.status_code == 200 else None
        if not isinstance(usage, dict):
            return 0, 0, 0
        if "input_tokens" in usage:  # the Responses API's names
            details = usage.get("input_tokens_details") or {}
            return int(usage["input_tokens"]), int(details.get("cached_tokens", 0)), int(usage.get("output_tokens", 0))
        details = usage.get("prompt_tokens_details") or {}
        return (
            int(usage.get("prompt_tokens", 0)),
            int(details.get("cached_tokens", 0) or 0),
            int(usage.get("completion_tokens", 0) or 0),
        )


async def _connected() -> Any:
    """A batch has no client connection to lose: the `receive` of a request nobody disconnects."""
    await anyio.sleep_forever()


_Request = TypeVar("_Request", bound=BaseModel)


def _parsed(model: type[_Request], body: dict[str, Any]) -> _Request:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise validation_to_error(RequestValidationError(exc.errors())) from exc


def _unstreamed(body: dict[str, Any]) -> None:
    if body.get("stream"):
        raise InvalidRequestError("A batch's requests cannot stream; leave `stream` out.", param="stream")


class LineRunner:
    """Runs a line's request body against its endpoint, as `caller`."""

    def __init__(
        self, pipeline: ChatPipeline, responses: ResponsesService, embeddings: EmbeddingService,
        completions: CompletionsService, moderation: ModerationService,
    ) -> None:  # fmt: skip
        self._endpoints: dict[str, Callable[[Caller, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            "/v1/chat/completions": self._chat,
            "/v1/responses": self._response,
            "/v1/embeddings": self._embeddings,
            "/v1/completions": self._completion,
            "/v1/moderations": self._moderation,
        }
        self.pipeline = pipeline
        self.responses = responses
        self.embeddings = embeddings
        self.completions = completions
        self.moderation = moderation

    async def run(self, caller: Caller, endpoint: str, body: dict[str, Any], request_id: str) -> LineAnswer:
        with billed_as_batch_line(request_id):
            try:
                return LineAnswer(200, await self._endpoints[endpoint](caller, body))
            except FleetchatError as exc:
                return LineAnswer(exc.status_code, exc.to_response_model().model_dump(), exc)

    async def _chat(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        _unstreamed(body)
        result = await self.pipeline.run(
            ChatCall(caller=caller, body=_parsed(ChatCompletionRequest, body), receive=_connected)
        )
        assert not isinstance(result, StreamAnswer)
        return with_required_nulls(result.body)

    async def _response(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        _unstreamed(body)
        call = ResponseCall(caller=caller, request=_parsed(ResponsesRequest, body), receive=_connected)
        result = await self.responses.create(call)
        assert not isinstance(result, StreamAnswer)
        return result.body

    async def _embeddings(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        response, _ = await self.embeddings.embed(caller, _parsed(EmbeddingRequest, body))
        return response

    async def _moderation(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        response, _ = await self.moderation.moderate(caller, _parsed(ModerationRequest, body))
        return response.model_dump()

    async def _completion(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        _unstreamed(body)
        answer = await self.completions.answer(caller, _parsed(CompletionRequest, body), _connected)
        assert answer.body is not None
        return answer.body

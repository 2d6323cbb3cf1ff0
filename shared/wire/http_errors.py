"""Error responses for every FastAPI app we serve: validation, domain and unexpected errors as OpenAI error objects,
and a request-body size limit enforced before the body is read."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.errors import ErrorInfo, ErrorResponse, FleetchatError, InvalidRequestError, PayloadTooLargeError

log = logging.getLogger("fleetchat.errors")


def error_json(error: FleetchatError) -> JSONResponse:
    return JSONResponse(
        error.to_response_model().model_dump(), status_code=error.status_code, headers=error.headers or None
    )


def validation_to_error(exc: RequestValidationError) -> InvalidRequestError:
    """The first validation problem, phrased the way the OpenAI API phrases it."""
    errors: list[dict[str, Any]] = list(exc.errors())
    first = errors[0] if errors else {"type": "value_error", "loc": (), "msg": "invalid request"}
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    param = ".".join(loc) or None
    kind = first.get("type", "")
    if kind == "json_invalid":
        return InvalidRequestError(
            "We could not parse the JSON body of your request. The body must be valid JSON.", code="invalid_json"
        )
    if kind == "missing":
        if param is None:
            return InvalidRequestError("The request body is empty; a JSON object is required.", code="invalid_json")
        message = f"Missing required parameter: '{param}'."
        return InvalidRequestError(message, param=param, code="missing_required_parameter")
    if kind == "extra_forbidden":  # a field the model does not declare: OpenAI's wording for unknown arguments
        return InvalidRequestError(f"Unrecognized request argument supplied: {param}", param=param)
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    return InvalidRequestError(f"Invalid value for '{param}': {message}", param=param, code="invalid_value")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(FleetchatError)
    async def _domain(_: Request, exc: FleetchatError) -> JSONResponse:
        return error_json(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_json(validation_to_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if isinstance(exc.__cause__, BodyTooLarge):  # FastAPI wraps errors raised while reading the body
            return error_json(exc.__cause__.error)
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        body = ErrorResponse(error=ErrorInfo(message=str(exc.detail), type=kind, code=None))
        return JSONResponse(body.model_dump(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        info = ErrorInfo(message="The server had an error processing your request.", type="server_error")
        body = ErrorResponse(error=info)
        return JSONResponse(body.model_dump(), status_code=500)


class BodySizeLimitMiddleware:
    """Refuse bodies over `max_bytes` with 413, by Content-Length up front or by counting a chunked body."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = PayloadTooLargeError(f"Request body is larger than the {self.max_bytes}-byte limit.")
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await error_json(too_large)(scope, receive, send)
                return
        received = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(too_large)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            response_started = response_started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not response_started:
                await error_json(too_large)(scope, receive, send)


class BodyTooLarge(Exception):
    """Raised from `receive` when a chunked body passes the limit."""

    def __init__(self, error: PayloadTooLargeError) -> None:
        super().__init__(error.message)
        self.error = error

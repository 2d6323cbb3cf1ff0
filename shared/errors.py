"""The OpenAI error object, the domain exception tree, and the one mapping from exceptions to responses.

Exception tree::

    FleetchatError                      status, type, code, param
    ├── InvalidRequestError             400 invalid_request_error
    │   └── ContextLengthExceededError  400 code=context_length_exceeded
    ├── AuthenticationError             401 code=invalid_api_key
    ├── PermissionDeniedError           403 (admin-only endpoints, a cross-site request with a session cookie)
    ├── NotFoundError                   404
    │   └── ModelNotFoundError          404 code=model_not_found
    ├── PayloadTooLargeError            413
    ├── RateLimitError                  429 type=requests|tokens code=rate_limit_exceeded, retry-after
    │   └── QuotaExceededError          429 type=insufficient_quota, x-should-retry: false
    ├── UpstreamError                   502 (a worker failed or answered garbage)
    └── ServiceUnavailableError         503 (no healthy worker), carries retry-after
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorInfo


class FleetchatError(Exception):
    status_code: int = 500
    error_type: str = "server_error"
    default_code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code
        self.headers = headers or {}

    def to_response_model(self) -> ErrorResponse:
        return ErrorResponse(
            error=ErrorInfo(message=self.message, type=self.error_type, param=self.param, code=self.code)
        )


class InvalidRequestError(FleetchatError):
    status_code = 400
    error_type = "invalid_request_error"


class ContextLengthExceededError(InvalidRequestError):
    default_code = "context_length_exceeded"


class ContentPolicyViolationError(InvalidRequestError):
    """The safety gate refused the conversation before any model saw it."""

    default_code = "content_policy_violation"


class AuthenticationError(FleetchatError):
    status_code = 401
    error_type = "invalid_request_error"
    default_code = "invalid_api_key"


class PermissionDeniedError(FleetchatError):
    status_code = 403
    error_type = "invalid_request_error"
    default_code = "permission_denied"


class NotFoundError(FleetchatError):
    status_code = 404
    error_type = "invalid_request_error"
    default_code = "not_found"


class ModelNotFoundError(NotFoundError):
    default_code = "model_not_found"


class PayloadTooLargeError(FleetchatError):
    status_code = 413
    error_type = "invalid_request_error"
    default_code = "request_too_large"


def _retry_after(seconds: float) -> str:
    """The rules cap retry-after at 60 s so clients never park for long."""
    return str(min(max(math.ceil(seconds), 1), 60))


class RateLimitError(FleetchatError):
    """A per-minute limit is spent for now: retry after the window resets (the SDK does, honouring retry-after)."""

    status_code = 429
    default_code = "rate_limit_exceeded"

    def __init__(self, message: str, *, limit_type: str, retry_after_s: float, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.error_type = limit_type  # OpenAI reports which limit: "requests" or "tokens"
        self.headers.setdefault("retry-after", _retry_after(retry_after_s))


class QuotaExceededError(RateLimitError):
    """A cap that a quick retry cannot cure (the rolling message cap, a request larger than the whole budget)."""

    def __init__(self, message: str, *, retry_after_s: float, code: str, **kwargs: Any) -> None:
        super().__init__(message, limit_type="insufficient_quota", retry_after_s=retry_after_s, code=code, **kwargs)
        self.headers["x-should-retry"] = "false"


class UpstreamError(FleetchatError):
    status_code = 502
    error_type = "server_error"
    default_code = "upstream_error"


class ServiceUnavailableError(FleetchatError):
    status_code = 503
    error_type = "server_error"
    default_code = "service_unavailable"

    def __init__(self, message: str, *, retry_after_s: int = 5, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.headers.setdefault("retry-after", _retry_after(retry_after_s))


_BY_STATUS: dict[int, type[FleetchatError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: ModelNotFoundError,
    413: PayloadTooLargeError,
    503: ServiceUnavailableError,
}


def error_from_upstream(status_code: int, body: Any) -> FleetchatError:
    """Turn an OpenAI-compatible upstream error (ours or vLLM's) into the most specific domain error.

    vLLM reports an over-long prompt as a plain 400 without a code, so the message decides.
    """
    info = body.get("error") if isinstance(body, dict) else None
    if isinstance(info, dict):
        message = str(info.get("message") or "upstream error")
        param, code = info.get("param"), info.get("code")
    else:
        message, param, code = (str(body)[:500] or "upstream error"), None, None
    code = code if isinstance(code, str) else None
    if status_code == 400 and (code == "context_length_exceeded" or "maximum context length" in message):
        return ContextLengthExceededError(message, param=param or "messages")
    cls = _BY_STATUS.get(status_code)
    if cls is None:
        return UpstreamError(f"worker answered {status_code}: {message}")
    return cls(message, param=param, code=code)

"""Upstream errors (ours or vLLM's) map to the most specific OpenAI error."""

from __future__ import annotations

from shared.errors import (
    ContextLengthExceededError,
    ModelNotFoundError,
    ServiceUnavailableError,
    UpstreamError,
    error_from_upstream,
)


def test_vllm_context_error_without_code_becomes_context_length_exceeded() -> None:
    body = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    }
    error = error_from_upstream(400, body)
    assert isinstance(error, ContextLengthExceededError)
    assert error.code == "context_length_exceeded" and error.param == "messages"


def test_known_statuses_keep_their_class_and_unknown_become_502() -> None:
    assert isinstance(error_from_upstream(404, {"error": {"message": "no", "code": None}}), ModelNotFoundError)
    assert isinstance(error_from_upstream(500, "boom"), UpstreamError)
    assert error_from_upstream(500, "boom").status_code == 502


def test_retry_after_is_capped_at_sixty_seconds() -> None:
    assert ServiceUnavailableError("busy", retry_after_s=600).headers["retry-after"] == "60"
    assert ServiceUnavailableError("busy", retry_after_s=0).headers["retry-after"] == "1"


def test_an_undeclared_field_reads_as_openais_unrecognized_argument() -> None:
    from fastapi.exceptions import RequestValidationError

    from shared.wire.http_errors import validation_to_error

    error = validation_to_error(
        RequestValidationError([{"type": "extra_forbidden", "loc": ("body", "messages", 0, "foo"), "msg": "Extra"}])
    )
    assert error.param == "messages.0.foo"
    assert error.message == "Unrecognized request argument supplied: messages.0.foo"

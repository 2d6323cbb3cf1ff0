"""Several choices (`n` > 1): what the gateway serves with them and what it refuses, with the reason.

A worker answers `n` choices as sequences of one prompt (gpu_workers/server/chat_serving.py: the followers copy the
leader's prompt KV); the gateway screens every choice with a post-filter of its own (functions/chat/streams/relay.py,
delivery.filter_answer), bills the prompt once and every choice's tokens, and never caches them. What it refuses: a
stored conversation keeps one answer per turn; the server-tool loop, function-call checking and repair, and the
structured-output check and retry each act on one answer; a broken stream is not continued on another replica (a
continuation continues one answer)."""

from __future__ import annotations

from shared.errors import InvalidRequestError
from shared.wire.schemas import ChatCompletionRequest


def refuse_unserved_with_choices(
    request: ChatCompletionRequest, server_tools: list[str] | None, conversation_header: str | None = None
) -> None:
    """A 400 naming what `n` > 1 cannot be combined with here (nothing is reserved or stored before it);
    `conversation_header`: the request's `x-conversation-id`, which names a conversation as `conversation_id` does."""
    if request.n == 1:
        return
    stored = bool(request.store) or request.conversation_id is not None or conversation_header is not None
    combined = [
        ("store", stored, "a stored conversation keeps one answer per turn"),
        ("server_tools", bool(server_tools), "server tools run for one answer"),
        ("tools", bool(request.tools), "function calls are checked and repaired for one answer"),
        (
            "response_format",
            request.response_format is not None and request.response_format.type != "text",
            "structured output is checked and retried for one answer",
        ),
    ]
    for param, present, reason in combined:
        if present:
            raise InvalidRequestError(
                f"n > 1 cannot be combined with '{param}' here: {reason}. Send n=1, or several requests.",
                param="n",
                code="unsupported_parameter",
            )

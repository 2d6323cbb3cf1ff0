"""A finished completion told as a chat-completions SSE stream, for a client that asked to stream a request the
gateway answered in non-streamed rounds (server-side tools): the same chunks a worker would send, with usage on
every chunk (as vLLM's `continuous_usage_stats`; the relay reshapes it for the client) and then `[DONE]`."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from typing import Any

from shared.wire.sse import DONE, sse_json

CONTENT_PIECE = 64  # characters per content chunk


def chunks(completion: dict[str, Any], extension: dict[str, Any], *, role: bool = True) -> Iterator[dict[str, Any]]:
    """The stream's chunks; `extension` (e.g. `server_tool_runs`) rides on the chunk with the finish reason. `role`:
    whether to open with the role chunk (a stream that already sent it does not)."""
    base = {"id": completion.get("id", ""), "object": "chat.completion.chunk",
            "created": completion.get("created", 0), "model": completion.get("model", "")}  # fmt: skip
    usage = completion.get("usage")
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None, **more: Any) -> dict[str, Any]:
        choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
        return {**base, "choices": choices, **more, **({"usage": usage} if usage else {})}

    if role:
        yield chunk({"role": "assistant", "content": ""})
    content = message.get("content") or ""
    for start in range(0, len(content), CONTENT_PIECE):
        yield chunk({"content": content[start : start + CONTENT_PIECE]})
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        head = {"index": index, "id": call.get("id"), "type": "function",
                "function": {"name": function.get("name"), "arguments": ""}}  # fmt: skip
        yield chunk({"tool_calls": [head]})
        if function.get("arguments"):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": function["arguments"]}}]})
    yield chunk({}, choice.get("finish_reason") or "stop", **extension)
    if usage:
        yield {**base, "choices": [], "usage": usage}


class ReplayedStream:
    """Has what the chat router takes from a worker's stream: `events()`, SSE bytes ending with `[DONE]`."""

    def __init__(self, completion: dict[str, Any], extension: dict[str, Any]) -> None:
        self.completion = completion
        self.extension = extension

    async def events(self) -> AsyncGenerator[bytes, None]:
        for chunk in chunks(self.completion, self.extension):
            yield sse_json(chunk)
        yield DONE

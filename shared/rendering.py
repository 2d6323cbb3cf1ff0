"""Prefix-stable rendering: a stored conversation plus its new turn -> the exact messages sent to the worker.

The prefix-cache contract: the same stored history always renders to the same bytes, so turn N's prompt starts
with turn N-1's prompt token for token and the worker's KV blocks for it are reused. Nothing time-dependent or
unordered goes into a rendered message. Each conversation keeps the render version it was created with; any change
to what a version produces is a new version (the golden test pins version 1's bytes), never an edit of an old one.

Tool turns (an assistant message's `tool_calls`, a `tool` message's `tool_call_id`) render in OpenAI's message shape,
arguments exactly as stored. They extend version 1 rather than start version 2: a stored history could not hold them
before (tool messages were refused), so no output version 1 ever produced changes (the golden test pins version 1's
bytes with and without tool turns), and every existing conversation can go on with tools.

Images (a user message's `image_url` parts, checked data URIs) render as the parts the client sent, in order; like
tool turns they extend version 1: no stored message held one before.

Custom instructions (`guidance`) are an input of their own, not stored history: they end the first system message,
the same bytes for the same instructions, so a conversation's turns share their prefix while the instructions stay.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from shared.storage.conversations import StoredMessage

RenderedMessages = list[dict[str, Any]]

# The service's default system prompt, by render version; used when a conversation brings no system message.
SYSTEM_PROMPTS: dict[int, str] = {
    1: "You are fleetchat, a helpful assistant. Answer clearly and accurately.",
}


def _render_v1(history: Sequence[StoredMessage], new: Sequence[StoredMessage]) -> RenderedMessages:
    messages = [*history, *new]
    rendered: RenderedMessages = []
    if not messages or messages[0].role not in ("system", "developer"):
        rendered.append({"role": "system", "content": SYSTEM_PROMPTS[1]})
    rendered.extend({"role": m.role, "content": _content(m)} for m in messages)
    return rendered


def _content(message: StoredMessage) -> str | list[dict[str, Any]]:
    """The text; a message with images: its parts as sent (no message could hold images before, so every stored
    text-only message keeps its version-1 bytes)."""
    if message.content_parts is None:
        return message.content
    return [part.model_dump(exclude_none=True) for part in message.content_parts]


def _tool_fields(message: StoredMessage) -> dict[str, Any]:
    """A tool turn in OpenAI's message shape: an assistant's calls (content null when it has none), the call a `tool`
    message answers; {} for every other message, which keeps its version-1 bytes."""
    if message.tool_calls:
        return {"content": message.content or None, "tool_calls": [c.model_dump() for c in message.tool_calls]}
    if message.role == "tool":
        return {"tool_call_id": message.tool_call_id}
    return {}


def _render_v1_with_tool_turns(history: Sequence[StoredMessage], new: Sequence[StoredMessage]) -> RenderedMessages:
    rendered = _render_v1(history, new)
    offset = len(rendered) - len(history) - len(new)  # the default system prompt, when one was added
    for i, message in enumerate([*history, *new], start=offset):
        rendered[i].update(_tool_fields(message))
    return rendered


RENDERERS: dict[int, Callable[[Sequence[StoredMessage], Sequence[StoredMessage]], RenderedMessages]] = {
    1: _render_v1_with_tool_turns
}
CURRENT_RENDER_VERSION = max(RENDERERS)


class UnknownRenderVersionError(RuntimeError):
    """A stored conversation names a render version this build does not have (a newer deployment wrote it)."""


def render(
    render_version: int,
    history: Sequence[StoredMessage],
    new: Sequence[StoredMessage],
    guidance: str | None = None,
) -> RenderedMessages:
    """`guidance`: the user's custom instructions (functions/chat/instructions.py), which end the first system message
    after a blank line. Without them every version's output is as it always was."""
    renderer = RENDERERS.get(render_version)
    if renderer is None:
        raise UnknownRenderVersionError(f"render version {render_version} is unknown to this build")
    rendered = renderer(history, new)
    if guidance:
        first = rendered[0]  # a system (or developer) message: every version opens with one
        rendered[0] = {**first, "content": f"{first.get('content') or ''}\n\n{guidance}"}
    return rendered


def canonical_bytes(messages: RenderedMessages) -> bytes:
    """The bytes a rendering is compared by (and what the golden test pins)."""
    return json.dumps(messages, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()

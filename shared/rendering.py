"""Prefix-stable rendering: a stored conversation plus its new turn -> the exact messages sent to the worker.

The prefix-cache contract: the same stored history always renders to the same bytes, so turn N's prompt starts
with turn N-1's prompt token for token and the worker's KV blocks for it are reused. Nothing time-dependent or
unordered goes into a rendered message. Each conversation keeps the render version it was created with; any change
to what a version produces is a new version (the golden test pins version 1's bytes), never an edit of an old one.

Version 2 adds tool turns (an assistant message's `tool_calls`, a `tool` message's `tool_call_id`), rendered in
OpenAI's message shape with the arguments exactly as stored; for a history without tool turns it produces version 1's
bytes. Version 1 has no tool turns: a version-1 conversation that would need them is refused (`ToolTurnsUnsupported`),
never rendered without them.
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
    rendered.extend({"role": m.role, "content": m.content} for m in messages)
    return rendered


class ToolTurnsUnsupportedError(ValueError):
    """The conversation's render version predates tool turns."""


def _render_v2(history: Sequence[StoredMessage], new: Sequence[StoredMessage]) -> RenderedMessages:
    """Version 1 plus tool turns (the system-prompt rule and every other byte as in version 1)."""
    rendered = _render_v1(history, new)
    offset = len(rendered) - len(history) - len(new)  # the default system prompt, if one was added
    for i, m in enumerate([*history, *new], start=offset):
        if m.tool_calls:
            rendered[i] = {
                "role": m.role,
                "content": m.content or None,
                "tool_calls": [c.model_dump() for c in m.tool_calls],
            }
        elif m.role == "tool":
            rendered[i] = {"role": "tool", "content": m.content, "tool_call_id": m.tool_call_id}
    return rendered


def _no_tool_turns(
    renderer: Callable[[Sequence[StoredMessage], Sequence[StoredMessage]], RenderedMessages],
) -> Callable[[Sequence[StoredMessage], Sequence[StoredMessage]], RenderedMessages]:
    def render_without(history: Sequence[StoredMessage], new: Sequence[StoredMessage]) -> RenderedMessages:
        if any(m.role == "tool" or m.tool_calls for m in [*history, *new]):
            raise ToolTurnsUnsupportedError("this conversation's render version has no tool turns")
        return renderer(history, new)

    return render_without


RENDERERS: dict[int, Callable[[Sequence[StoredMessage], Sequence[StoredMessage]], RenderedMessages]] = {
    1: _no_tool_turns(_render_v1),
    2: _render_v2,
}
CURRENT_RENDER_VERSION = max(RENDERERS)


class UnknownRenderVersionError(RuntimeError):
    """A stored conversation names a render version this build does not have (a newer deployment wrote it)."""


def render(render_version: int, history: Sequence[StoredMessage], new: Sequence[StoredMessage]) -> RenderedMessages:
    renderer = RENDERERS.get(render_version)
    if renderer is None:
        raise UnknownRenderVersionError(f"render version {render_version} is unknown to this build")
    return renderer(history, new)


def canonical_bytes(messages: RenderedMessages) -> bytes:
    """The bytes a rendering is compared by (and what the golden test pins)."""
    return json.dumps(messages, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()

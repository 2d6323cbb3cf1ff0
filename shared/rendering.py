"""Prefix-stable rendering: a stored conversation plus its new turn -> the exact messages sent to the worker.

The prefix-cache contract: the same stored history always renders to the same bytes, so turn N's prompt starts
with turn N-1's prompt token for token and the worker's KV blocks for it are reused. Nothing time-dependent or
unordered goes into a rendered message. Each conversation keeps the render version it was created with; any change
to what a version produces is a new version (the golden test pins version 1's bytes), never an edit of an old one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from shared.storage.conversations import StoredMessage

RenderedMessages = list[dict[str, str]]

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


RENDERERS: dict[int, Callable[[Sequence[StoredMessage], Sequence[StoredMessage]], RenderedMessages]] = {1: _render_v1}
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

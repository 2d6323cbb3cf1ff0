"""Conversation exports: one conversation as JSON or Markdown, a whole account as a streamed JSON document."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

from pydantic import BaseModel
from starlette.concurrency import iterate_in_threadpool

from shared.service_api.conversation_api import ConversationDetail
from shared.storage.conversations import Conversation
from shared.storage.timestamps import to_iso, utc_now

ROLE_HEADINGS = {"system": "System", "developer": "Developer", "user": "User", "assistant": "Assistant", "tool": "Tool"}


def to_markdown(conversation: Conversation) -> str:
    lines = [f"# {conversation.title or 'Untitled conversation'}", ""]
    lines.append(f"_Conversation `{conversation.id}`, exported {to_iso(utc_now())}._")
    for message in conversation.messages:
        lines += ["", f"## {ROLE_HEADINGS.get(message.role, message.role)}", "", message.content]
        # Tool turns (docs/tools.md): the calls an answer made, and which call a tool result answers.
        lines += [f"`{c.function.name}({c.function.arguments})` (call `{c.id}`)" for c in message.tool_calls or []]
        if message.tool_call_id:
            lines.append(f"_Result of call `{message.tool_call_id}`._")
    return "\n".join(lines) + "\n"


async def account_export_json(
    tenant_id: str,
    conversations: Iterator[Conversation],
    feedback: Iterator[BaseModel] | None = None,
    sections: dict[str, Iterator[BaseModel]] | None = None,
) -> AsyncIterator[bytes]:
    """`{"object": "account.export", ..., "conversations": [...], "feedback": [...]}`, one item at a time (constant
    memory); `feedback` only when given; then each further section by its name (files, vector stores)."""
    head = {"object": "account.export", "tenant_id": tenant_id, "exported_at": int(utc_now().timestamp())}
    yield json.dumps(head)[:-1].encode() + b', "conversations": ['
    first = True
    async for conversation in iterate_in_threadpool(conversations):
        yield (b"" if first else b",") + ConversationDetail.of(conversation).model_dump_json().encode()
        first = False
    yield b"]"
    if feedback is not None:
        yield b', "feedback": ['
        first = True
        async for item in iterate_in_threadpool(feedback):
            yield (b"" if first else b",") + item.model_dump_json().encode()
            first = False
        yield b"]"
    for name, items in (sections or {}).items():
        yield f", {json.dumps(name)}: [".encode()
        first = True
        async for item in iterate_in_threadpool(items):
            yield (b"" if first else b",") + item.model_dump_json().encode()
            first = False
        yield b"]"
    yield b"}"

"""Conversation exports: one conversation as JSON or Markdown, a whole account as a streamed JSON document."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator

from pydantic import BaseModel
from starlette.concurrency import iterate_in_threadpool

from shared.service_api.conversation_api import ConversationDetail
from shared.storage.conversations import Conversation, StoredMessage
from shared.storage.timestamps import to_iso, utc_now
from shared.wire.server_tool_runs import ServerToolRunView, run_code

ROLE_HEADINGS = {"system": "System", "developer": "Developer", "user": "User", "assistant": "Assistant", "tool": "Tool"}


def to_markdown(conversation: Conversation) -> str:
    """The active branch, then every other branch from where it leaves what was already printed (each stored
    message once)."""
    lines = [f"# {conversation.title or 'Untitled conversation'}", ""]
    lines.append(f"_Conversation `{conversation.id}`, exported {to_iso(utc_now())}._")
    for message in conversation.path():
        lines += _message_lines(message)
    tree = conversation.tree()
    printed = set(tree.path_ids(conversation.leaf()))
    others = [leaf for leaf in tree.leaves() if leaf not in printed]
    if others:
        lines += ["", "---", "", "## Other branches"]
    for leaf in others:
        path = tree.path_ids(leaf)
        start = next(i for i, node in enumerate(path) if node not in printed)
        versions = tree.sibling_ids(path[start])
        lines += ["", f"_Message {path[start]}, version {versions.index(path[start]) + 1} of {len(versions)}:_"]
        for node in path[start:]:
            lines += _message_lines(conversation.messages[node])
            printed.add(node)
    return "\n".join(lines) + "\n"


def _message_lines(message: StoredMessage) -> list[str]:
    lines = ["", f"## {ROLE_HEADINGS.get(message.role, message.role)}", "", message.content]
    images = sum(part.type == "image_url" for part in message.content_parts or ())
    if images:  # the JSON export carries them (`content_parts`); Markdown says they were there
        lines.append(f"_({images} image{'s' if images > 1 else ''} attached: in the JSON export.)_")
    # Tool turns (docs/tools.md): the calls an answer made, and which call a tool result answers.
    lines += [f"`{c.function.name}({c.function.arguments})` (call `{c.id}`)" for c in message.tool_calls or []]
    if message.tool_call_id:
        lines.append(f"_Result of call `{message.tool_call_id}`._")
    for run in message.server_tool_runs or []:
        lines += ["", *_run_lines(run)]
    return lines


def _fenced(text: str, language: str = "") -> list[str]:
    fence = "`" * max(3, max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return [fence + language, text, fence]


def _run_lines(run: ServerToolRunView) -> list[str]:
    """One of the gateway's tool runs behind an answer (docs/server-tools.md): the code it ran, what it printed, the
    files it offered."""
    took = f", {run.duration_ms} ms" if run.duration_ms is not None else ""
    lines = [f"_Ran the {run.tool} tool ({run.status}{took})._"]
    code = run_code(run)
    if code:
        lines += _fenced(code, "python" if run.tool == "python" else "")
    result = run.result or {}
    shown = result.get("output") if run.tool == "python" else result.get("value")
    if shown not in (None, ""):
        lines += ["", "Output:", *_fenced(str(shown))]
    if result.get("error"):
        lines.append(f"_Error: {result['error']}_")
    lines += [f"- File `{f.filename}` (`{f.file_id}`, {f.bytes} bytes)" for f in run.files]
    if run.content_filtered:
        lines.append("_Part of this run was kept back by the safety filter._")
    return lines


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

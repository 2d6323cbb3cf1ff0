"""OpenAI's Response object made from what the model answered (a chat completion, a finished stream, or a stored
turn): one builder, so a response reads the same created, streamed and retrieved."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from shared.wire.openai_shape import reasoning_of
from shared.wire.responses_api import ResponseRecord, ResponseUsageRecord
from shared.wire.retrieval_api import Citation

# How a chat answer ended, as the Response's status and incomplete reason.
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
_CANCELLED = "stopped"  # stored with an answer the client stopped (functions/chat/streams/relay.py)
_FAILED = "error"


@dataclass
class AnswerParts:
    """What one answer holds, however it arrived."""

    text: str = ""
    reasoning: str = ""  # a reasoning model's reasoning text (vLLM's `reasoning`): the reasoning item's content
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # chat's shape: {id, function: {name, arguments}}
    finish_reason: str | None = None
    model: str | None = None
    usage: ResponseUsageRecord | None = None
    logprobs: list[dict[str, Any]] | None = None  # chat's `logprobs.content` entries
    citations: list[Citation] = field(default_factory=list)
    searched: bool = False  # the gateway ran a file search for this answer
    query: str | None = None  # the question it searched for
    error: dict[str, Any] | None = None  # an in-band error that ended the answer
    conversation_id: str | None = None  # where the turn was stored, when the gateway said so (a branch may differ)

    @classmethod
    def from_completion(cls, completion: dict[str, Any], query: str | None) -> AnswerParts:
        choice = (completion.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        retrieval = completion.get("retrieval") or {}
        return cls(
            text=message.get("content") or "",
            reasoning=reasoning_of(message) or "",
            tool_calls=list(message.get("tool_calls") or []),
            finish_reason=choice.get("finish_reason"),
            model=completion.get("model"),
            usage=usage_record(completion.get("usage")),
            logprobs=(choice.get("logprobs") or {}).get("content"),
            citations=[Citation.model_validate(c) for c in retrieval.get("citations") or []],
            searched=bool(retrieval),
            query=query,
            conversation_id=stored_conversation(completion.get("conversation")),
        )


def stored_conversation(summary: dict[str, Any] | None) -> str | None:
    """The conversation a turn was stored in, from the chat answer's `conversation` extension (None: not stored)."""
    if isinstance(summary, dict) and summary.get("stored"):
        return summary.get("id")
    return None


def usage_record(usage: dict[str, Any] | None) -> ResponseUsageRecord | None:
    """Chat usage (prompt / completion / cached tokens) in the Responses API's terms."""
    if not usage:
        return None
    details = usage.get("prompt_tokens_details") or {}
    return ResponseUsageRecord(
        input_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
    )


def usage_object(usage: ResponseUsageRecord) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        # A paged prefix cache keeps every prompt token the engine computed (until evicted): all but the cached ones.
        "input_tokens_details": {
            "cached_tokens": usage.cached_tokens,
            "cache_write_tokens": max(usage.input_tokens - usage.cached_tokens, 0),
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def item_id(kind: str, response_id: str, index: int = 0) -> str:
    """A stable id for an item of a response (the same when the response is retrieved later)."""
    return f"{kind}_{response_id.removeprefix('resp_')}{index:02d}"


def status_of(parts: AnswerParts) -> tuple[str, dict[str, str] | None]:
    """The Response's status and incomplete details."""
    if parts.error is not None or parts.finish_reason == _FAILED:
        return "failed", None
    if parts.finish_reason == _CANCELLED:
        return "cancelled", None
    if (reason := _INCOMPLETE.get(parts.finish_reason or "")) is not None:
        return "incomplete", {"reason": reason}
    return "completed", None


def logprobs_items(entries: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Chat's per-token log-probabilities in the Responses shape (the same fields, `bytes` always present)."""

    def one(entry: dict[str, Any]) -> dict[str, Any]:
        return {
            "token": entry.get("token", ""),
            "logprob": entry.get("logprob", 0.0),
            "bytes": entry.get("bytes") or [],
        }

    return [{**one(e), "top_logprobs": [one(t) for t in e.get("top_logprobs") or []]} for e in entries or []]


def annotations(text: str, citations: list[Citation]) -> list[dict[str, Any]]:
    """A `file_citation` per cited file, at its first `[n]` marker in the text (the end when the model wrote none)."""
    seen: dict[str, dict[str, Any]] = {}
    for citation in citations:
        if citation.file_id in seen:
            continue
        marker = text.find(f"[{citation.index}]")
        index = marker if marker >= 0 else len(text)
        seen[citation.file_id] = {
            "type": "file_citation",
            "file_id": citation.file_id,
            "filename": citation.filename,
            "index": index,
        }
    return sorted(seen.values(), key=lambda a: a["index"])


def message_item(response_id: str, parts: AnswerParts, *, status: str, with_logprobs: bool) -> dict[str, Any]:
    content = {
        "type": "output_text",
        "text": parts.text,
        "annotations": annotations(parts.text, parts.citations),
        "logprobs": logprobs_items(parts.logprobs) if with_logprobs else [],
    }
    return {
        "id": item_id("msg", response_id),
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [content],
    }


def reasoning_item(response_id: str, text: str, *, status: str) -> dict[str, Any]:
    """A reasoning model's reasoning as OpenAI's reasoning item: its text as `reasoning_text` content, no summary
    (vLLM makes none) and no encrypted content (the reasoning is not sent back to the model on later turns)."""
    return {
        "id": item_id("rs", response_id),
        "type": "reasoning",
        "status": status,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def function_call_item(response_id: str, index: int, call: dict[str, Any], *, status: str) -> dict[str, Any]:
    function = call.get("function") or {}
    return {
        "id": item_id("fc", response_id, index),
        "type": "function_call",
        "status": status,
        "call_id": call.get("id", ""),
        "name": function.get("name", ""),
        "arguments": function.get("arguments", ""),
    }


def file_search_item(response_id: str, parts: AnswerParts, *, with_results: bool) -> dict[str, Any]:
    results = (
        [
            {"file_id": c.file_id, "filename": c.filename, "score": c.score, "text": c.text, "attributes": {}}
            for c in parts.citations
        ]
        if with_results
        else None
    )
    return {
        "id": item_id("fs", response_id),
        "type": "file_search_call",
        "status": "completed",
        "queries": [parts.query] if parts.query else [],
        "results": results,
    }


def output_items(
    record: ResponseRecord, parts: AnswerParts, *, with_logprobs: bool, with_results: bool
) -> list[dict[str, Any]]:
    """The output items in the order the answer made them: the file search, the reasoning, the message, the function
    calls."""
    status, _ = status_of(parts)
    item_status = "completed" if status == "completed" else "incomplete"
    items: list[dict[str, Any]] = []
    if parts.searched:
        items.append(file_search_item(record.id, parts, with_results=with_results))
    if parts.reasoning:
        items.append(reasoning_item(record.id, parts.reasoning, status=item_status))
    if parts.text or (not parts.tool_calls and parts.error is None):
        items.append(message_item(record.id, parts, status=item_status, with_logprobs=with_logprobs))
    items += [function_call_item(record.id, i, call, status=item_status) for i, call in enumerate(parts.tool_calls)]
    return items


def response_object(
    record: ResponseRecord,
    parts: AnswerParts | None,
    *,
    stored: bool,
    conversation_id: str | None,
    with_logprobs: bool = False,
    with_results: bool = False,
    completed_at: int | None = None,
) -> dict[str, Any]:
    """The Response: in progress (no answer yet: `parts` None) or as the answer ended (`completed_at`: when it did;
    now by default)."""
    if parts is None:
        status, incomplete, output, usage = "in_progress", None, [], None
    else:
        status, incomplete = status_of(parts)
        output = output_items(record, parts, with_logprobs=with_logprobs, with_results=with_results)
        usage = parts.usage
    error = None
    if parts is not None and status == "failed":
        found = parts.error or {}
        error = {"code": "server_error", "message": found.get("message") or "The model could not finish the answer."}
    response = {
        "id": record.id,
        "object": "response",
        "created_at": record.created_at,
        "status": status,
        "completed_at": (completed_at or int(time.time())) if status == "completed" else None,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": record.instructions,
        "max_output_tokens": record.max_output_tokens,
        "max_tool_calls": record.max_tool_calls,
        "model": (parts.model if parts is not None and parts.model else None) or record.model,
        "output": output,
        "parallel_tool_calls": record.parallel_tool_calls,
        "previous_response_id": record.previous_response_id,
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": stored,
        "temperature": record.temperature if record.temperature is not None else 1.0,
        "text": record.text,
        "tool_choice": record.tool_choice,
        "tools": record.tools,
        "top_logprobs": record.top_logprobs or 0,
        "top_p": record.top_p if record.top_p is not None else 1.0,
        "truncation": "disabled",
        "usage": usage_object(usage) if usage is not None else None,
        "user": record.user,
        "metadata": record.metadata,
        "safety_identifier": record.safety_identifier,
        "prompt_cache_key": record.prompt_cache_key,
        "conversation": {"id": stored} if (stored := (parts and parts.conversation_id) or conversation_id) else None,
    }
    # Optional fields OpenAI's schema does not let be null (usage before the answer ended): left out when unset.
    for name in ("user", "safety_identifier", "prompt_cache_key", "usage"):
        if response[name] is None:
            del response[name]
    return response

"""Watch a relayed chat-completions SSE stream: collect the answer's text, how it finished, and its usage so far;
reshape the usage the client sees into OpenAI's (only on the last chunk, and only when asked)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from shared.wire.openai_shape import reasoning_of
from shared.wire.sse import sse_json

_FILTERED_CHOICE = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "content_filter"}


@dataclass(frozen=True)
class CaptureMark:
    """What a capture had seen at one point, to take back an event that is not going to be relayed."""

    choice_parts: int
    reasoning_parts: int
    finished_choices: int
    usage: dict[str, Any] | None
    content_chunks: int
    finish_reason: str | None


@dataclass
class StreamCapture:
    """Fed every worker event before it is relayed; knows the answer so far and the ids a closing chunk repeats.

    The gateway asks the worker for usage on every chunk (vLLM's `continuous_usage_stats`) so an aborted stream is
    billed for what was generated; clients get usage only in the final usage chunk, and only with `include_usage`.
    """

    client_wants_usage: bool = False
    choices: int = 1  # the request's `n`
    # Every choice's text deltas in order, by choice index (n > 1: the post-filter reads each choice apart); the first
    # choice's are the answer stored and judged.
    choice_parts: list[tuple[int, str]] = field(default_factory=list)
    # A reasoning model's reasoning deltas (vLLM's `reasoning`, formerly `reasoning_content`), by choice index: shown
    # to the client, so judged by the post-filter as the text is (never stored with the turn, never in a prompt).
    reasoning_parts: list[tuple[int, str]] = field(default_factory=list)
    finished_choices: list[int] = field(default_factory=list)  # the choices whose finish reason was seen, in order
    finish_reason: str | None = None
    failed: bool = False
    completion_id: str = ""
    created: int = 0  # the stream's, repeated on the chunks the gateway adds (one stream, one `created`)
    model: str = ""
    usage: dict[str, Any] | None = None
    content_chunks: int = 0
    # The answer's tool calls, assembled from `delta.tool_calls` fragments by index (stored with the turn).
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    # The gateway's own tool calls that ended, by call id, as the client saw them (`server_tool_run` chunks,
    # functions/chat/server_tools/rounds_stream.py; stored with the turn).
    server_tool_runs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def relay(self, event: bytes) -> bytes | None:
        """Observe one event; what the client gets for it (None: nothing)."""
        if event.startswith(b"event: error"):
            self.failed = True
            return event
        if not event.startswith(b"data: {"):
            return event
        try:
            chunk = json.loads(event[len(b"data: ") :])
        except ValueError:
            return event
        self.completion_id = chunk.get("id") or self.completion_id
        self.created = self.created or int(chunk.get("created") or 0)
        self.model = chunk.get("model") or self.model
        run = chunk.get("server_tool_run")
        if isinstance(run, dict) and run.get("status") != "running":
            self.server_tool_runs[str(run.get("tool_call_id"))] = run
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if content:
                self.choice_parts.append((int(choice.get("index") or 0), content))
                self.content_chunks += 1
            if reasoning := reasoning_of(delta):
                self.reasoning_parts.append((int(choice.get("index") or 0), reasoning))
                self.content_chunks += 1
            for fragment in (choice.get("delta") or {}).get("tool_calls") or []:
                self._add_call_fragment(fragment)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
                self.finished_choices.append(int(choice.get("index") or 0))
        usage = chunk.get("usage")
        if usage is None:
            return event
        self.usage = usage
        if chunk.get("choices") == []:  # the final usage chunk
            return event if self.client_wants_usage else None
        if self.client_wants_usage:
            chunk["usage"] = None  # OpenAI's shape: null on every chunk but the last
        else:
            del chunk["usage"]
        return sse_json(chunk)

    def _add_call_fragment(self, fragment: dict[str, Any]) -> None:
        fn = fragment.get("function") or {}
        call = self.calls.setdefault(
            int(fragment.get("index") or 0), {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
        )
        call["id"] = fragment.get("id") or call["id"]
        call["function"]["name"] += fn.get("name") or ""
        call["function"]["arguments"] += fn.get("arguments") or ""

    @property
    def tool_calls(self) -> list[dict[str, Any]] | None:
        return [self.calls[i] for i in sorted(self.calls)] or None

    @property
    def text(self) -> str:
        return "".join(text for index, text in self.choice_parts if index == 0)

    def mark(self) -> CaptureMark:
        return CaptureMark(
            len(self.choice_parts),
            len(self.reasoning_parts),
            len(self.finished_choices),
            self.usage,
            self.content_chunks,
            self.finish_reason,
        )

    def text_since(self, mark: CaptureMark) -> dict[int, str]:
        """Each choice's text since `mark`, by choice index (only choices that said something); a choice's reasoning
        under the key `-(index + 1)` (read by a post-filter of its own)."""
        texts: dict[int, str] = {}
        for index, text in self.choice_parts[mark.choice_parts :]:
            texts[index] = texts.get(index, "") + text
        for index, text in self.reasoning_parts[mark.reasoning_parts :]:
            texts[-(index + 1)] = texts.get(-(index + 1), "") + text
        return texts

    def restore(self, mark: CaptureMark) -> None:
        """Forget everything observed since `mark` (the event was withheld from the client)."""
        del self.choice_parts[mark.choice_parts :]
        del self.reasoning_parts[mark.reasoning_parts :]
        del self.finished_choices[mark.finished_choices :]
        self.usage, self.content_chunks, self.finish_reason = mark.usage, mark.content_chunks, mark.finish_reason

    def filtered_chunks(self) -> list[bytes]:
        """What ends a halted stream: a chunk with finish_reason "content_filter" for every choice not yet finished,
        then (if the client asked for usage) the usage of what was sent."""
        self.finish_reason = "content_filter"
        base = {"id": self.completion_id, "object": "chat.completion.chunk", "created": self._created()}
        open_choices = [index for index in range(self.choices) if index not in self.finished_choices] or [0]
        choices = [{**_FILTERED_CHOICE, "index": index} for index in open_choices]
        chunks = [sse_json({**base, "model": self.model, "choices": choices})]
        if self.client_wants_usage and self.usage is not None:
            chunks.append(sse_json({**base, "model": self.model, "choices": [], "usage": self.usage}))
        return chunks

    def _created(self) -> int:
        return self.created or int(time.time())

    @property
    def completed(self) -> bool:
        """The worker finished the answer (no error event, a finish reason seen)."""
        return not self.failed and self.finish_reason is not None

    def closing_chunk(self, extension: dict[str, Any]) -> bytes:
        """A last chunk with no choices that carries the `conversation` extension object, before `[DONE]`."""
        return sse_json(
            {
                "id": self.completion_id,
                "object": "chat.completion.chunk",
                "created": self._created(),
                "model": self.model,
                "choices": [],
                "conversation": extension,
            }
        )


def answer_text(completion: dict[str, Any]) -> tuple[str, str | None]:
    """The assistant text and finish reason of a non-streamed completion body."""
    choices = completion.get("choices") or [{}]
    message = choices[0].get("message") or {}
    return str(message.get("content") or ""), choices[0].get("finish_reason")

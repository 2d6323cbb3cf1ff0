"""The Responses API's typed streaming events made from the chat pipeline's stream: `response.created`, output items
opened and closed around text and function-call argument deltas, and `response.completed` (or `.incomplete`,
`.failed`) carrying the whole Response, each with its `sequence_number` (docs/responses.md).

The chat stream a response is made from is buffered (and shared across gateways) as it is, led by a head event that
says which response it is (`ResponseHead`); the events are made from the buffer's start for every reader, so they are
the same, sequence numbers included, whichever gateway a client reads or resumes them from."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from pydantic import BaseModel

from functions.responses.objects import (
    AnswerParts,
    file_search_item,
    function_call_item,
    item_id,
    logprobs_items,
    message_item,
    reasoning_item,
    response_object,
    status_of,
    stored_conversation,
    usage_record,
)
from shared.errors import UpstreamError
from shared.wire.openai_shape import reasoning_of
from shared.wire.responses_api import ResponseRecord
from shared.wire.retrieval_api import Citation
from shared.wire.sse import DONE, sse_json

HEAD_EVENT = "fleetchat.response_head"


class ResponseHead(BaseModel):
    """What making a response's events needs besides the chat stream: the first event of its buffer."""

    record: ResponseRecord
    stored: bool
    conversation_id: str | None = None
    query: str | None = None  # the question a file search looked for
    with_logprobs: bool = False
    with_results: bool = False

    def frame(self) -> bytes:
        return b"event: " + HEAD_EVENT.encode() + b"\ndata: " + self.model_dump_json().encode() + b"\n\n"

    def build(self, parts: AnswerParts | None) -> dict[str, Any]:
        """The Response in progress (`parts` None) or as the answer ended."""
        return response_object(
            self.record,
            parts,
            stored=self.stored,
            conversation_id=self.conversation_id,
            with_logprobs=self.with_logprobs,
            with_results=self.with_results,
        )


def frame(event: dict[str, Any]) -> bytes:
    """One SSE event named by its type, as OpenAI sends them."""
    return b"event: " + event["type"].encode() + b"\n" + sse_json(event)


def sse_fields(event: bytes) -> tuple[str | None, str | None]:
    """(event name, data) of one framed SSE event."""
    name = data = None
    for line in event.decode("utf-8", errors="replace").split("\n"):
        if line.startswith("event:"):
            name = line[len("event:") :].strip()
        elif line.startswith("data:"):
            data = line[len("data:") :].strip()
    return name, data


async def response_events(chat_events: AsyncGenerator[bytes, None], after: int = -1) -> AsyncGenerator[bytes, None]:
    """A buffered response stream (its head, then the chat stream, from the start) as the response's events, those
    with a sequence number above `after` only (a client resuming with `starting_after`). Closing it closes the
    buffer's reader (a client that leaves detaches, as from a chat stream)."""
    async with contextlib.aclosing(chat_events):
        first = await anext(chat_events, None)
        name, data = sse_fields(first) if first is not None else (None, None)
        if name != HEAD_EVENT or data is None:
            error = UpstreamError("This stream is not a response's.")
            yield frame(
                {"type": "error", "sequence_number": 0, "code": error.code, "message": error.message, "param": None}
            )
            return
        events = ResponseEvents(ResponseHead.model_validate_json(data), after=after)
        async with contextlib.aclosing(events.run(chat_events)) as shaped:
            async for event in shaped:
                yield event


class ResponseEvents:
    """Translate one chat stream into one response's events."""

    def __init__(self, head: ResponseHead, *, after: int = -1) -> None:
        self.head = head
        self.record = head.record
        self.with_logprobs = head.with_logprobs
        self.with_results = head.with_results
        self.after = after
        self.parts = AnswerParts(query=head.query)
        self.sequence = 0
        self.next_index = 0  # the next output item's index
        self.message_index: int | None = None  # the open message item
        self.reasoning_index: int | None = None  # the reasoning item (a reasoning model's), open until text follows
        self.reasoning_open = False
        self.calls: dict[int, int] = {}  # chat's tool-call index -> output index

    def event(self, kind: str, **fields: Any) -> bytes:
        """The next event, framed (empty when a resuming client had it already)."""
        sequence, self.sequence = self.sequence, self.sequence + 1
        if sequence <= self.after:
            return b""
        return frame({"type": kind, "sequence_number": sequence, **fields})

    async def run(self, chat_events: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
        async with contextlib.aclosing(self._all(chat_events)) as events:
            async for event in events:
                if event:
                    yield event

    async def _all(self, chat_events: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
        yield self.event("response.created", response=self.head.build(None))
        yield self.event("response.in_progress", response=self.head.build(None))
        async for chat_event in chat_events:
            name, data = sse_fields(chat_event)
            if data == "[DONE]":
                for closing in self._close_items():
                    yield closing
                yield self._terminal()
                yield DONE  # the buffer's end marker (never sent to the client: routers/responses.py)
                return
            if data is None:
                continue
            body = json.loads(data)
            if name == "error" or "error" in body:
                self.parts.error = body.get("error") or {}
                error = self.parts.error
                yield self.event(
                    "error", code=error.get("code"), message=error.get("message", ""), param=error.get("param")
                )
                continue
            for event in self._chunk(body):
                yield event

    def _chunk(self, chunk: dict[str, Any]) -> list[bytes]:
        events: list[bytes] = []
        parts = self.parts
        if chunk.get("model"):
            parts.model = chunk["model"]
        if (usage := usage_record(chunk.get("usage"))) is not None:
            parts.usage = usage
        if (stored := stored_conversation(chunk.get("conversation"))) is not None:
            parts.conversation_id = stored
        if (retrieval := chunk.get("retrieval")) is not None:
            parts.searched = True
            parts.citations = [Citation.model_validate(c) for c in retrieval.get("citations") or []]
            events += self._file_search()
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if reasoning := reasoning_of(delta):
                events += self._reasoning(reasoning)
            if delta.get("content") or delta.get("tool_calls"):
                events += self._close_reasoning()  # the reasoning is over once the answer starts
            if content := delta.get("content"):
                events += self._text(content, (choice.get("logprobs") or {}).get("content"))
            for call in delta.get("tool_calls") or []:
                events += self._call(call)
            if choice.get("finish_reason"):
                parts.finish_reason = choice["finish_reason"]
        return events

    def _file_search(self) -> list[bytes]:
        index = self._take_index()
        item = file_search_item(self.record.id, self.parts, with_results=self.with_results)
        in_progress = {**item, "status": "in_progress", "results": None}
        return [
            self.event("response.output_item.added", output_index=index, item=in_progress),
            self.event("response.file_search_call.in_progress", output_index=index, item_id=item["id"]),
            self.event("response.file_search_call.searching", output_index=index, item_id=item["id"]),
            self.event("response.file_search_call.completed", output_index=index, item_id=item["id"]),
            self.event("response.output_item.done", output_index=index, item=item),
        ]

    def _text(self, content: str, logprobs: list[dict[str, Any]] | None) -> list[bytes]:
        events: list[bytes] = []
        msg_id = item_id("msg", self.record.id)
        if self.message_index is None:
            self.message_index = self._take_index()
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item = {"id": msg_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
            events.append(self.event("response.output_item.added", output_index=self.message_index, item=item))
            events.append(
                self.event(
                    "response.content_part.added",
                    item_id=msg_id,
                    output_index=self.message_index,
                    content_index=0,
                    part=empty,
                )
            )
        self.parts.text += content
        if logprobs:
            self.parts.logprobs = [*(self.parts.logprobs or []), *logprobs]
        events.append(
            self.event(
                "response.output_text.delta",
                item_id=msg_id,
                output_index=self.message_index,
                content_index=0,
                delta=content,
                logprobs=logprobs_items(logprobs) if self.with_logprobs else [],
            )
        )
        return events

    def _reasoning(self, text: str) -> list[bytes]:
        events: list[bytes] = []
        rs_id = item_id("rs", self.record.id)
        if self.reasoning_index is None:
            self.reasoning_index, self.reasoning_open = self._take_index(), True
            item = {"id": rs_id, "type": "reasoning", "status": "in_progress", "summary": [], "content": []}
            events.append(self.event("response.output_item.added", output_index=self.reasoning_index, item=item))
        self.parts.reasoning += text
        events.append(
            self.event(
                "response.reasoning_text.delta",
                item_id=rs_id,
                output_index=self.reasoning_index,
                content_index=0,
                delta=text,
            )
        )
        return events

    def _close_reasoning(self, status: str = "completed") -> list[bytes]:
        if not self.reasoning_open or self.reasoning_index is None:
            return []
        self.reasoning_open = False
        item = reasoning_item(self.record.id, self.parts.reasoning, status=status)
        common = {"item_id": item["id"], "output_index": self.reasoning_index, "content_index": 0}
        return [
            self.event("response.reasoning_text.done", **common, text=self.parts.reasoning),
            self.event("response.output_item.done", output_index=self.reasoning_index, item=item),
        ]

    def _call(self, delta: dict[str, Any]) -> list[bytes]:
        events: list[bytes] = []
        position = int(delta.get("index", 0))
        function = delta.get("function") or {}
        calls = self.parts.tool_calls
        if position not in self.calls:
            self.calls[position] = self._take_index()
            calls.append({"id": delta.get("id") or "", "type": "function", "function": {"name": "", "arguments": ""}})
            calls[-1]["function"]["name"] = function.get("name") or ""
            item = function_call_item(self.record.id, len(calls) - 1, calls[-1], status="in_progress")
            events.append(self.event("response.output_item.added", output_index=self.calls[position], item=item))
        number = list(self.calls).index(position)
        call = calls[number]
        if arguments := function.get("arguments"):
            call["function"]["arguments"] += arguments
            events.append(
                self.event(
                    "response.function_call_arguments.delta",
                    item_id=item_id("fc", self.record.id, number),
                    output_index=self.calls[position],
                    delta=arguments,
                )
            )
        return events

    def _take_index(self) -> int:
        index, self.next_index = self.next_index, self.next_index + 1
        return index

    def _close_items(self) -> list[bytes]:
        """The done events of the items still open, in output order."""
        status, _ = status_of(self.parts)
        item_status = "completed" if status == "completed" else "incomplete"
        events: list[bytes] = self._close_reasoning(item_status)
        if self.message_index is None and not self.parts.tool_calls and self.parts.error is None:
            # An answer with no text at all (an empty completion): its empty message item, as OpenAI sends one.
            self.message_index = self._take_index()
            msg = message_item(self.record.id, self.parts, status="in_progress", with_logprobs=False)
            events.append(
                self.event("response.output_item.added", output_index=self.message_index, item={**msg, "content": []})
            )
            events.append(
                self.event(
                    "response.content_part.added",
                    item_id=msg["id"],
                    output_index=self.message_index,
                    content_index=0,
                    part={**msg["content"][0], "text": ""},
                )
            )
        if self.message_index is not None:
            msg = message_item(self.record.id, self.parts, status=item_status, with_logprobs=self.with_logprobs)
            part = msg["content"][0]
            common = {"item_id": msg["id"], "output_index": self.message_index, "content_index": 0}
            events.append(
                self.event("response.output_text.done", **common, text=part["text"], logprobs=part["logprobs"])
            )
            events.append(self.event("response.content_part.done", **common, part=part))
            events.append(self.event("response.output_item.done", output_index=self.message_index, item=msg))
        for number, (_, index) in enumerate(self.calls.items()):
            item = function_call_item(self.record.id, number, self.parts.tool_calls[number], status=item_status)
            events.append(
                self.event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
            events.append(self.event("response.output_item.done", output_index=index, item=item))
        return events

    def _terminal(self) -> bytes:
        response = self.head.build(self.parts)
        kind = {"completed": "response.completed", "failed": "response.failed"}.get(
            response["status"], "response.incomplete"
        )
        return self.event(kind, response=response)

"""Watch a relayed chat-completions SSE stream: collect the answer's text and whether it finished cleanly."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StreamCapture:
    """Fed every event the gateway relays; knows the answer so far and the ids a closing chunk must repeat."""

    parts: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    failed: bool = False
    completion_id: str = ""
    model: str = ""

    def observe(self, event: bytes) -> None:
        if event.startswith(b"event: error"):
            self.failed = True
            return
        if not event.startswith(b"data: {"):
            return
        try:
            chunk = json.loads(event[len(b"data: ") :])
        except ValueError:
            return
        self.completion_id = chunk.get("id") or self.completion_id
        self.model = chunk.get("model") or self.model
        for choice in chunk.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if content:
                self.parts.append(content)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def completed(self) -> bool:
        """The worker finished the answer (no error event, a finish reason seen)."""
        return not self.failed and self.finish_reason is not None

    def closing_chunk(self, extension: dict[str, Any]) -> bytes:
        """A last chunk with no choices that carries the `conversation` extension object, before `[DONE]`."""
        chunk = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model,
            "choices": [],
            "conversation": extension,
        }
        return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def answer_text(completion: dict[str, Any]) -> tuple[str, str | None]:
    """The assistant text and finish reason of a non-streamed completion body."""
    choices = completion.get("choices") or [{}]
    message = choices[0].get("message") or {}
    return str(message.get("content") or ""), choices[0].get("finish_reason")

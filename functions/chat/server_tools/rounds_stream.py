"""The server-tool rounds told as a chat-completions SSE stream while they happen: the role chunk, then each call's
view as it starts and as it ends (`server_tool_run`, shared/wire/server_tool_runs.py), then the final completion
replayed (functions/chat/server_tools/replay.py) and `[DONE]`.

Every chunk has the first round's id, a choice with an empty delta (so a client reading `choices[0]` never meets an
empty list) and the usage so far (as vLLM's `continuous_usage_stats`: the relay bills a stream that stops mid-way for
the rounds that ran, and shows usage to the client only at the end). Once the stream has started, a failure (the
round bound, a tenant out of sandbox places, an upstream error) ends it with an in-band error event and `[DONE]`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any

from functions.chat.server_tools.replay import chunks
from functions.chat.server_tools.steps import Final, Step
from shared.errors import FleetchatError, UpstreamError
from shared.wire.server_tool_runs import ServerToolRunView
from shared.wire.sse import DONE, sse_error, sse_json

log = logging.getLogger("fleetchat.server_tools")

Told = Callable[[dict[str, Any]], tuple[dict[str, Any], dict[str, Any]]]


class RoundsStream:
    """Has what the chat router takes from a worker's stream: `events()`, SSE bytes ending with `[DONE]`.

    `first`: the first step (the first round ran before the response started); `rest`: the loop's later steps;
    `head`: the first round's id, created and model; `usage`: the rounds' usage so far; `told`: the final completion
    and the extension its finish chunk carries."""

    def __init__(
        self,
        first: ServerToolRunView,
        rest: AsyncGenerator[Step, None],
        head: dict[str, Any],
        usage: Callable[[], dict[str, Any]],
        told: Told,
    ) -> None:
        self.first = first
        self.rest = rest
        self.head = head
        self.usage = usage
        self.told = told

    def _chunk(self, **fields: Any) -> dict[str, Any]:
        base = {"id": self.head.get("id") or "", "object": "chat.completion.chunk",
                "created": self.head.get("created") or 0, "model": self.head.get("model") or ""}  # fmt: skip
        usage = self.usage()
        return {**base, **fields, **({"usage": usage} if usage else {})}

    def _choice(self, delta: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]

    async def events(self) -> AsyncGenerator[bytes, None]:
        yield sse_json(self._chunk(choices=self._choice({"role": "assistant", "content": ""})))
        step: Step = self.first
        try:
            while not isinstance(step, Final):
                yield sse_json(self._chunk(choices=self._choice({}), server_tool_run=step.client_json()))
                step = await anext(self.rest)
            completion, extension = self.told(step.completion)
            completion = {**completion, **{key: value for key, value in self.head.items() if value}}
            for chunk in chunks(completion, extension, role=False):
                yield sse_json(chunk)
        except FleetchatError as exc:
            yield sse_error(exc)
        except Exception:
            log.exception("the server tools' rounds failed mid-stream")
            yield sse_error(UpstreamError("The server tools' rounds failed."))
        finally:
            await self.rest.aclose()
        yield DONE

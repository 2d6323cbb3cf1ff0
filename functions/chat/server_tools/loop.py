"""The orchestrator: answer a request whose model may call the gateway's own tools.

    round k (k < max_rounds): worker, non-streamed, with the server tools' definitions added to `tools`
        -> the model called server tools only: run each, append the assistant turn and one `role: "tool"` message
           per call, next round
        -> anything else (an answer, or a call to a tool of the client's): the loop ends, that goes back
    round max_rounds: the server tools are withdrawn (client tools stay) so the model must answer; a worker that
        still calls one ends the request with 502 `server_tool_rounds_exceeded`

Every round is a whole (non-streamed) worker call, so the rounds' tool calls arrive complete. A client that asked to
stream gets the calls as they happen (functions/chat/server_tools/rounds_stream.py: each call's view as it starts and
as it ends, functions/chat/server_tools/display.py), then the final completion replayed as a stream; the first round
runs before the response starts, so its errors are the response's status. Usage is the sum over the rounds. A message
that calls both kinds of tool goes back with only the client's calls (the server's are dropped unrun: the client must
answer its calls before the conversation can go on).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from anyio import to_thread

from functions.chat.server_tools.context import RunContext
from functions.chat.server_tools.display import RunDisplay, call_arguments, call_name
from functions.chat.server_tools.replay import ReplayedStream
from functions.chat.server_tools.rounds_stream import RoundsStream
from functions.chat.server_tools.runner import ToolRunner
from functions.chat.server_tools.steps import Final, Step
from functions.chat.streams.continuation import Leg
from functions.control.request_accounting import RequestAccount, TokenUsage
from functions.safety.injection_screen import InjectionScreen
from functions.safety.untrusted_context import judged, rewritten_arguments, rewritten_result
from shared.errors import FleetchatError, UpstreamError
from shared.storage.ledger import Outcome
from shared.wire.server_tool_runs import ServerToolRunView

Complete = Callable[[Leg], Awaitable[dict[str, Any]]]
AnswerStream = ReplayedStream | RoundsStream


def add_usage(total: dict[str, Any], usage: dict[str, Any] | None) -> dict[str, Any]:
    if not usage:
        return total
    cached = (total.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0
    prompt = total.get("prompt_tokens", 0) + int(usage.get("prompt_tokens") or 0)
    completion = total.get("completion_tokens", 0) + int(usage.get("completion_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}  # fmt: skip


@dataclasses.dataclass
class ToolLoop:
    runner: ToolRunner
    names: list[str]  # the server tools this request asked for
    definitions: list[dict[str, Any]]
    context: RunContext
    max_rounds: int
    # Closed here with the rounds' usage when the loop fails after some rounds ran (the chat router's own close,
    # without usage, is then a no-op): tokens a worker generated are billed whatever happens next.
    account: RequestAccount | None = None
    # Screens each run's result and the arguments the model wrote (functions/safety/untrusted_context.py): a flagged
    # one reaches the next round quoted inertly (or withheld, a deny rule), and the run's view says which.
    injection: InjectionScreen | None = None
    display: RunDisplay = dataclasses.field(default_factory=RunDisplay)  # what the client sees of the calls
    views: list[ServerToolRunView] = dataclasses.field(default_factory=list)  # the ended calls', in order
    usage: dict[str, Any] = dataclasses.field(default_factory=dict)
    head: dict[str, Any] = dataclasses.field(default_factory=dict)  # the first round's id, created and model

    async def answer(self, complete: Complete, leg: Leg, *, streamed: bool) -> dict[str, Any] | AnswerStream:
        """The final completion with `server_tool_runs`; streamed: the calls as they happen, then the final
        completion told as a stream. Either way the first round has run when this returns."""
        steps = self._steps(complete, leg)
        step = await anext(steps)
        if streamed and not isinstance(step, Final):
            return RoundsStream(step, steps, self.head, lambda: self.usage, self._told)
        while not isinstance(step, Final):
            step = await anext(steps)
        await steps.aclose()
        completion, extension = self._told(step.completion)
        return ReplayedStream(completion, extension) if streamed else {**completion, **extension}

    async def _steps(self, complete: Complete, leg: Leg) -> AsyncGenerator[Step, None]:
        """The rounds' steps; a loop that ends before its final step (an error, a client that left) closes its
        request's books with the rounds' usage."""
        final = False
        try:
            async for step in self._rounds(complete, leg):
                final = isinstance(step, Final)
                yield step
        except BaseException as exc:
            if not final and self.account is not None and self.usage:
                outcome = Outcome.FAILED if isinstance(exc, FleetchatError) else Outcome.ABORTED
                await self.account.close(TokenUsage.from_openai(self.usage), outcome)
            raise

    async def _rounds(self, complete: Complete, leg: Leg) -> AsyncGenerator[Step, None]:
        body = {k: v for k, v in leg.body.items() if k != "stream_options"}
        body["stream"] = False
        client_tools = list(body.get("tools") or [])
        messages = list(body["messages"])
        for round_number in range(self.max_rounds + 1):
            last = round_number == self.max_rounds
            request = {**body, "messages": messages, "tools": client_tools + self.definitions}
            if last:
                request = self._without_server_tools(request, client_tools)
            completion = await complete(dataclasses.replace(leg, body=request))
            if not self.head:  # one stream, one id: the first round's
                self.head = {key: completion.get(key) for key in ("id", "created", "model")}
            self.usage = add_usage(self.usage, completion.get("usage"))
            message = ((completion.get("choices") or [{}])[0]).get("message") or {}
            calls = message.get("tool_calls") or []
            ours = [c for c in calls if call_name(c) in self.names]
            theirs = [c for c in calls if call_name(c) not in self.names]
            if not ours or theirs:
                if ours:
                    message["tool_calls"] = theirs
                yield Final(completion)
                return
            if last:
                raise UpstreamError(
                    f"the model still called a server tool after {self.max_rounds} rounds of tool calls",
                    code="server_tool_rounds_exceeded",
                )
            messages.append(
                {"role": "assistant", "content": message.get("content"), "tool_calls": await self._screened(ours)}
            )
            for call in ours:
                yield await self.display.started(call)
                run = await self.runner.run(
                    str(call.get("id") or ""), call_name(call), call_arguments(call), self.context
                )
                content = run.content
                verdict = await to_thread.run_sync(judged, content, self.injection)
                if verdict is not None:
                    content = rewritten_result(content, verdict)
                view = await self.display.finished(run, verdict.action if verdict is not None else None)
                self.views.append(view)
                yield view
                messages.append({"role": "tool", "tool_call_id": run.call_id, "content": content})
        raise AssertionError("unreachable")

    async def _screened(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The calls as the next round's prompt carries them: flagged arguments rewritten (the runs get them as the
        model wrote them)."""
        out = []
        for call in calls:
            function = call.get("function") or {}
            verdict = await to_thread.run_sync(judged, str(function.get("arguments") or ""), self.injection)
            if verdict is not None:
                rewritten = rewritten_arguments(str(function.get("arguments")), verdict)
                call = {**call, "function": {**function, "arguments": rewritten}}
            out.append(call)
        return out

    def _without_server_tools(self, request: dict[str, Any], client_tools: list[Any]) -> dict[str, Any]:
        """The last round's request: the server tools withdrawn, and a `tool_choice` that named one (or that needs a
        tool when none is left) dropped, so the model answers."""
        request = {**request, "tools": client_tools}
        choice = request.get("tool_choice")
        named = call_name(choice) if isinstance(choice, dict) else None
        if not client_tools:  # OpenAI refuses tool_choice and parallel_tool_calls without tools
            for field in ("tools", "tool_choice", "parallel_tool_calls"):
                request.pop(field, None)
        elif named in self.names:
            request["tool_choice"] = "auto"
        return request

    def _told(self, completion: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The final completion with the rounds' usage, and the extension listing the calls."""
        if self.usage:
            completion["usage"] = self.usage
        return completion, {"server_tool_runs": [view.client_json() for view in self.views]}

"""The orchestrator: answer a request whose model may call the gateway's own tools.

    round k (k < max_rounds): worker, non-streamed, with the server tools' definitions added to `tools`
        -> the model called server tools only: run each, append the assistant turn and one `role: "tool"` message
           per call, next round
        -> anything else (an answer, or a call to a tool of the client's): the loop ends, that goes back
    round max_rounds: the server tools are withdrawn (client tools stay) so the model must answer; a worker that
        still calls one ends the request with 502 `server_tool_rounds_exceeded`

Every round is a whole (non-streamed) worker call, so the rounds' tool calls arrive complete; a client that asked to
stream gets the final completion replayed as a stream (functions/chat/server_tools/replay.py) once it is done. Usage is
the sum over the rounds. A message that calls both kinds of tool goes back with only the client's calls (the
server's are dropped unrun: the client must answer its calls before the conversation can go on).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from anyio import to_thread

from functions.chat.server_tools.context import RunContext
from functions.chat.server_tools.replay import ReplayedStream
from functions.chat.server_tools.runner import ToolRun, ToolRunner
from functions.chat.streams.continuation import Leg
from functions.control.request_accounting import RequestAccount, TokenUsage
from functions.safety.injection_screen import InjectionScreen
from functions.safety.untrusted_context import judged, rewritten_arguments, rewritten_result
from shared.errors import FleetchatError, UpstreamError
from shared.storage.ledger import Outcome

Complete = Callable[[Leg], Awaitable[dict[str, Any]]]


def add_usage(total: dict[str, Any], usage: dict[str, Any] | None) -> dict[str, Any]:
    if not usage:
        return total
    cached = (total.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0
    prompt = total.get("prompt_tokens", 0) + int(usage.get("prompt_tokens") or 0)
    completion = total.get("completion_tokens", 0) + int(usage.get("completion_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}  # fmt: skip


def _name(call: dict[str, Any]) -> str:
    return str((call.get("function") or {}).get("name") or "")


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
    # one reaches the next round quoted inertly (or withheld, a deny rule), and the run's summary says which.
    injection: InjectionScreen | None = None
    runs: list[ToolRun] = dataclasses.field(default_factory=list)
    quoted_calls: dict[str, str] = dataclasses.field(default_factory=dict)  # call id -> "quoted" / "withheld"
    usage: dict[str, Any] = dataclasses.field(default_factory=dict)

    async def answer(self, complete: Complete, leg: Leg, *, streamed: bool) -> dict[str, Any] | ReplayedStream:
        try:
            return await self._rounds(complete, leg, streamed)
        except BaseException as exc:
            if self.account is not None and self.usage:
                outcome = Outcome.FAILED if isinstance(exc, FleetchatError) else Outcome.ABORTED
                await self.account.close(TokenUsage.from_openai(self.usage), outcome)
            raise

    async def _rounds(self, complete: Complete, leg: Leg, streamed: bool) -> dict[str, Any] | ReplayedStream:
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
            self.usage = add_usage(self.usage, completion.get("usage"))
            message = ((completion.get("choices") or [{}])[0]).get("message") or {}
            calls = message.get("tool_calls") or []
            ours = [c for c in calls if _name(c) in self.names]
            theirs = [c for c in calls if _name(c) not in self.names]
            if not ours or theirs:
                if ours:
                    message["tool_calls"] = theirs
                return self._final(completion, streamed)
            if last:
                raise UpstreamError(
                    f"the model still called a server tool after {self.max_rounds} rounds of tool calls",
                    code="server_tool_rounds_exceeded",
                )
            messages.append(
                {"role": "assistant", "content": message.get("content"), "tool_calls": await self._screened(ours)}
            )
            for call in ours:
                arguments = str((call.get("function") or {}).get("arguments") or "")
                run = await self.runner.run(str(call.get("id") or ""), _name(call), arguments, self.context)
                self.runs.append(run)
                content = run.content
                verdict = await to_thread.run_sync(judged, content, self.injection)
                if verdict is not None:
                    content = rewritten_result(content, verdict)
                    self.quoted_calls[run.call_id] = verdict.action
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
        named = _name(choice) if isinstance(choice, dict) else None
        if not client_tools:  # OpenAI refuses tool_choice and parallel_tool_calls without tools
            for field in ("tools", "tool_choice", "parallel_tool_calls"):
                request.pop(field, None)
        elif named in self.names:
            request["tool_choice"] = "auto"
        return request

    def _final(self, completion: dict[str, Any], streamed: bool) -> dict[str, Any] | ReplayedStream:
        if self.usage:
            completion["usage"] = self.usage
        summaries = [
            {**run.summary(), **({self.quoted_calls[run.call_id]: True} if run.call_id in self.quoted_calls else {})}
            for run in self.runs
        ]
        extension = {"server_tool_runs": summaries}
        if streamed:
            return ReplayedStream(completion, extension)
        return {**completion, **extension}

"""What the client sees of the gateway's own tool calls (shared/wire/server_tool_runs.py): a call as it starts (the
code the model wrote) and as it ends (its output, files, how it went), each read first by the safety post-filter,
which keeps back what it flags and audits that as `withheld`.

A tool's code and output are the model's doing, like its answer, so they pass the same post-filter the answer does
before the client reads them; the model's own next round still gets the result (screened for planted instructions
by functions/safety/untrusted_context.py instead).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from anyio import to_thread

from functions.chat.server_tools.runner import ToolRun
from functions.control.request_accounting import RequestAccount
from functions.safety.pipeline import SafetyPipeline
from shared.storage.safety_audit import SafetyAction
from shared.wire.server_tool_runs import RunFile, ServerToolRunView

# The parts of a result that are text a person reads (the python tool's output, an error, the calculator's value).
_SHOWN_TEXT = ("output", "error", "value", "files_dropped")


def call_name(call: dict[str, Any]) -> str:
    return str((call.get("function") or {}).get("name") or "")


def call_arguments(call: dict[str, Any]) -> str:
    """A tool call's arguments as the model wrote them (JSON text)."""
    return str((call.get("function") or {}).get("arguments") or "")


def _result_text(result: dict[str, Any]) -> str:
    parts = [result.get(key) for key in _SHOWN_TEXT]
    return "\n".join(str(part) for part in parts if part not in (None, "", []))


@dataclass
class RunDisplay:
    """Builds the views of one request's calls. `safety`: the post-filter reading them for `account`'s caller (None:
    shown unread, for a loop outside a client's request)."""

    account: RequestAccount | None = None
    safety: SafetyPipeline | None = None
    _hidden_arguments: set[str] = field(default_factory=set)  # calls whose code the post-filter kept back

    async def started(self, call: dict[str, Any]) -> ServerToolRunView:
        call_id, arguments = str(call.get("id") or ""), call_arguments(call)
        shown = await self._shown(arguments)
        if not shown:
            self._hidden_arguments.add(call_id)
        return ServerToolRunView(
            tool_call_id=call_id,
            tool=call_name(call),
            status="running",
            arguments=arguments if shown else "",
            content_filtered=not shown,
        )

    async def finished(self, run: ToolRun, screen_action: str | None) -> ServerToolRunView:
        """`screen_action`: what the prompt-injection screen did with the result on its way to the model."""
        arguments_shown = run.call_id not in self._hidden_arguments
        result_shown = await self._shown(_result_text(run.result))
        return ServerToolRunView(
            tool_call_id=run.call_id,
            tool=run.tool,
            status=run.status.value,
            arguments=run.arguments if arguments_shown else "",
            duration_ms=run.duration_ms,
            result=run.result if result_shown else None,
            files=[RunFile.model_validate(f) for f in run.files],
            content_filtered=not (arguments_shown and result_shown),
            quoted=screen_action == "quoted",
            withheld=screen_action == "withheld",
        )

    async def _shown(self, text: str) -> bool:
        """Whether the post-filter lets `text` reach the client; a finding is audited as withheld."""
        account = self.account
        if self.safety is None or account is None or not text:
            return True
        _, finding = await to_thread.run_sync(self.safety.guard(account.caller).scan, text)
        if finding is None:
            return True
        await self.safety.record(finding, SafetyAction.WITHHELD, account.caller, account.request_id, account.model)
        return False

"""The gateway's server-side tools service: which tools a request asked for (`server_tools`, an extension field read
from the request's extra fields, refused with a 400 naming the `param` when wrong), and the tool loop that answers
it for the caller."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from functions.chat.server_tools.context import RunContext
from functions.chat.server_tools.display import RunDisplay
from functions.chat.server_tools.loop import ToolLoop
from functions.chat.server_tools.metrics import ServerToolMetrics
from functions.chat.server_tools.runner import ToolRunner
from functions.chat.server_tools.tool_files import ToolFiles
from functions.chat.server_tools.tools import CalculatorTool, PythonTool, ServerTool
from functions.control.request_accounting import RequestAccount
from functions.files.files_service import FilesService
from functions.safety.injection_screen import shipped_injection_screen
from functions.safety.pipeline import SafetyPipeline
from functions.sandbox.choice import sandbox_runner, sandbox_slots
from functions.sandbox.modal_sandboxes import CreateRemoteSandbox
from functions.spooled_writer import SpooledWriter
from shared.errors import InvalidRequestError, PermissionDeniedError
from shared.fleet.tables import policy_for, safety_for
from shared.fleet.tiers import Tier
from shared.server_tool_settings import ServerToolSettings
from shared.storage.control_state import ControlState
from shared.storage.limits import RateLimitStore
from shared.storage.tool_audit import ToolAuditStore, ToolRunRecord
from shared.wire.schemas import ChatCompletionRequest

FIELD = "server_tools"


class ServerTools:
    def __init__(self, settings: ServerToolSettings, tools: dict[str, ServerTool], runner: ToolRunner) -> None:
        self.settings = settings
        self.tools = tools
        self.runner = runner
        # Tool results the prompt-injection screen flags are quoted inertly (functions/safety/untrusted_context.py).
        self.injection = shipped_injection_screen()

    def offered(self, tier: Tier) -> list[str]:
        """The tools a caller of `tier` may ask for that run on this deployment (what the web chat offers)."""
        return [name for name in policy_for(tier).server_tools if self.tools[name].unavailable_reason() is None]

    def requested(self, body: ChatCompletionRequest, tier: Tier | None = None) -> list[str] | None:
        """The server tools the request asked for, in its order (None: none). Raises a 400 for anything else, and a
        403 for a tool `tier` does not offer."""
        asked = (body.model_extra or {}).get(FIELD)
        if asked is None or asked == []:
            return None
        if not isinstance(asked, list) or not all(isinstance(name, str) for name in asked):
            raise InvalidRequestError(f"`{FIELD}` must be a list of tool names.", param=FIELD)
        known = ", ".join(sorted(self.tools))
        for index, name in enumerate(asked):
            if name not in self.tools:
                raise InvalidRequestError(
                    f"Unknown server tool {name!r}; available: {known}.", param=f"{FIELD}[{index}]"
                )
            if tier is not None and name not in policy_for(tier).server_tools:
                raise PermissionDeniedError(
                    f"The {name} tool is not offered on the {tier.value} tier.",
                    param=f"{FIELD}[{index}]",
                    code="server_tool_not_in_tier",
                )
            if (reason := self.tools[name].unavailable_reason()) is not None:
                raise InvalidRequestError(f"{reason}.", param=f"{FIELD}[{index}]", code="server_tool_unavailable")
        names = list(dict.fromkeys(asked))
        client_tools: list[Any] = body.model_dump(exclude_none=True).get("tools") or []
        for index, tool in enumerate(client_tools):
            name = ((tool.get("function") or {}).get("name")) if isinstance(tool, dict) else None
            if name in names:
                raise InvalidRequestError(
                    f"The function name {name!r} is taken by the server tool of that name; rename your tool.",
                    param=f"tools[{index}].function.name",
                )
        return names

    def loop(self, names: list[str], account: RequestAccount, safety: SafetyPipeline | None = None) -> ToolLoop:
        """The tool loop answering `account`'s request (its caller, request id and books); `safety`'s post-filter
        reads the calls' code and results before the client sees them."""
        tenant = account.caller.tenant
        context = RunContext(
            tenant_id=tenant.id,
            key_id=account.caller.key.id,
            request_id=account.request_id,
            # The same switch as the safety audit's: content is kept only where the tenant's policy says so.
            audit_content=safety_for(tenant.tier, tenant.safety).audit_raw_content,
            caller=account.caller,
        )
        definitions = [self.tools[name].definition() for name in names]
        return ToolLoop(
            self.runner,
            names,
            definitions,
            context,
            self.settings.max_rounds,
            account,
            injection=self.injection,
            display=RunDisplay(account, safety),
        )


def server_tools_for(
    settings: ServerToolSettings,
    data_dir: Path,
    limits: RateLimitStore,
    audit: ToolAuditStore,
    metrics: ServerToolMetrics,
    redact: Callable[[str], str],
    *,
    control_state: ControlState | None = None,
    files: FilesService | None = None,
    create_modal_sandbox: CreateRemoteSandbox | None = None,
) -> ServerTools:
    """The gateway's tools. The python tool runs in the configured sandbox runner (on this machine it never shows
    `data_dir`: keys, database, spools), at most so many at once per tenant (counted in `control_state`, shared by the
    replicas) and per machine; it reads and keeps the caller's files through `files`. Whether the runner works here is
    probed now, at start-up, rather than on a request's path."""
    sandbox = settings.sandbox
    code_runner = sandbox_runner(sandbox, hidden=[data_dir], create_modal=create_modal_sandbox)
    code_runner.unavailable_reason()
    slots = sandbox_slots(sandbox, control_state, settings.python_timeout_s, create_modal_sandbox)
    tool_files = None if files is None else ToolFiles(files, max_input_bytes=settings.python_scratch_mb << 20)
    tools: dict[str, ServerTool] = {
        "python": PythonTool(settings, code_runner, slots, tool_files),
        "calculator": CalculatorTool(settings),
    }
    writer = SpooledWriter(audit.record, ToolRunRecord, data_dir / "tool-audit-spool.jsonl")
    runner = ToolRunner(settings, tools, limits, writer, metrics, redact)
    return ServerTools(settings, tools, runner)

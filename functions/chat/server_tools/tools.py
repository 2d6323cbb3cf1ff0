"""The server-side tools themselves: each one's function definition (what the model sees in `tools`), its
arguments' model, and its run, which returns what the model gets back and how the run went."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from functions.chat.server_tools.calculator import MAX_CHARS, CalculatorError, evaluate
from functions.chat.server_tools.context import RunContext
from functions.chat.server_tools.tool_files import ToolFileError, ToolFiles
from functions.sandbox.protocol import INPUT_DIR, OUTPUT_DIR, SandboxLimits, SandboxRunner, SandboxUnavailableError
from functions.sandbox.slots import SandboxSlots
from shared.server_tool_settings import ServerToolSettings
from shared.storage.tool_audit import LimitHit, ToolRunStatus


class ToolOutcome(BaseModel):
    status: ToolRunStatus
    result: dict[str, Any]  # what the model gets back (as JSON text in the `role: "tool"` message)
    exit_code: int | None = None
    limits_hit: list[LimitHit] = []  # the whole-sandbox limits the run ran into
    # Whether this counts against the tool's breaker: the tool itself failed (a sandbox that cannot start, a
    # calculator stuck past its backstop), not the input it was given (a program that raises or runs past its time
    # limit, an expression that does not parse).
    tool_failed: bool = False


class ServerTool(Protocol):
    name: str
    arguments: type[BaseModel]

    def definition(self) -> dict[str, Any]: ...

    def unavailable_reason(self) -> str | None:
        """Why the tool cannot run on this deployment (None: it can)."""
        ...

    async def run(self, arguments: Any, context: RunContext) -> ToolOutcome: ...


def _function(name: str, description: str, arguments: type[BaseModel]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": arguments.model_json_schema()},
    }


class PythonArguments(BaseModel):
    model_config = ConfigDict(extra="forbid", title="python")

    code: str = Field(min_length=1, max_length=20_000, description="A complete Python 3 program; print() results.")
    files: list[str] = Field(
        default=[],
        max_length=8,
        description=f"Ids of the user's uploaded files the program reads; each is at {INPUT_DIR}/<its filename>.",
    )


class PythonTool:
    """Python 3 (standard library only) in the configured sandbox runner; never run without one."""

    name = "python"
    arguments = PythonArguments

    def __init__(
        self, settings: ServerToolSettings, runner: SandboxRunner, slots: SandboxSlots, files: ToolFiles | None
    ) -> None:
        self.limits = SandboxLimits(
            timeout_s=settings.python_timeout_s,
            memory_mb=settings.python_memory_mb,
            sandbox_memory_mb=settings.python_sandbox_memory_mb,
            max_processes=settings.python_max_processes,
            scratch_mb=settings.python_scratch_mb,
            output_bytes=settings.python_output_bytes,
            out_files=settings.python_out_files,
            out_file_mb=settings.python_out_file_mb,
        )
        self.runner = runner
        self.slots = slots
        self.files = files

    def definition(self) -> dict[str, Any]:
        return _function(
            self.name,
            "Run a Python 3 program (standard library only) in a sandbox without network access and return its "
            f"exit code and printed output. Time limit {self.limits.timeout_s:g} s; only /tmp and {OUTPUT_DIR} are "
            f"writable. Files written to {OUTPUT_DIR} (text, Markdown, HTML, PDF, DOCX; at most "
            f"{self.limits.out_files}) are offered to the user for download.",
            self.arguments,
        )

    def unavailable_reason(self) -> str | None:
        reason = self.runner.unavailable_reason()
        return None if reason is None else f"the python tool is unavailable here: {reason}"

    async def run(self, arguments: PythonArguments, context: RunContext) -> ToolOutcome:
        try:
            inputs = await self._inputs(arguments, context)
        except ToolFileError as exc:
            return ToolOutcome(status=ToolRunStatus.ERROR, result={"error": str(exc)})
        try:
            async with self.slots.held(context.tenant_id):  # SandboxBusyError: the request's 429
                run = await self.runner.run(arguments.code, self.limits, inputs)
        except (SandboxUnavailableError, OSError) as exc:
            return ToolOutcome(status=ToolRunStatus.ERROR, result={"error": str(exc)}, tool_failed=True)
        result: dict[str, Any] = {"exit_code": run.exit_code, "output": run.output}
        if run.output_truncated:
            result["output_truncated"] = True
        if run.limits_hit:
            result["limits_hit"] = run.limits_hit
        if run.files and self.files is not None and context.caller is not None:
            kept, refused = await self.files.keep(context.caller, run.files)
            result["files"] = kept
            dropped = [*run.files_dropped, *refused]
        else:
            dropped = [*run.files_dropped, *[f"{f.name}: files cannot be kept here" for f in run.files]]
        if dropped:
            result["files_dropped"] = dropped
        if run.timed_out:
            result["error"] = f"killed at the time limit ({self.limits.timeout_s:g} s)"
            # The program's doing, as a program that raises is: it does not count against the tool's breaker, or one
            # tenant's endless loops would pause the tool for every tenant on this gateway.
            return ToolOutcome(status=ToolRunStatus.TIMEOUT, result=result, limits_hit=run.limits_hit)
        status = ToolRunStatus.OK if run.exit_code == 0 else ToolRunStatus.ERROR
        return ToolOutcome(status=status, result=result, exit_code=run.exit_code, limits_hit=run.limits_hit)

    async def _inputs(self, arguments: PythonArguments, context: RunContext) -> dict[str, bytes]:
        if not arguments.files:
            return {}
        if self.files is None or context.caller is None:
            raise ToolFileError("files cannot be read here")
        return await self.files.inputs(context.caller, arguments.files)


class CalculatorArguments(BaseModel):
    model_config = ConfigDict(extra="forbid", title="calculator")

    expression: str = Field(
        min_length=1,
        max_length=MAX_CHARS,
        description="An arithmetic expression: + - * / // % ** << >>, comparisons, sqrt, exp, log, log10, log2, "
        "sin, cos, tan, asin, acos, atan, hypot, floor, ceil, abs, round, min, max, pi, e, tau.",
    )


class CalculatorTool:
    name = "calculator"
    arguments = CalculatorArguments

    def __init__(self, settings: ServerToolSettings) -> None:
        self.timeout_s = settings.calculator_timeout_s

    def definition(self) -> dict[str, Any]:
        return _function(self.name, "Evaluate an arithmetic expression exactly and return its value.", self.arguments)

    def unavailable_reason(self) -> str | None:
        return None

    async def run(self, arguments: CalculatorArguments, context: RunContext) -> ToolOutcome:
        # The operands are bounded, so evaluation is short; the timeout is a backstop (a thread cannot be killed, but
        # the request no longer waits for it).
        try:
            value = await asyncio.wait_for(asyncio.to_thread(evaluate, arguments.expression), self.timeout_s)
        except TimeoutError:
            error = {"error": f"stopped at the time limit ({self.timeout_s:g} s)"}
            return ToolOutcome(status=ToolRunStatus.TIMEOUT, result=error, tool_failed=True)
        except CalculatorError as exc:
            return ToolOutcome(status=ToolRunStatus.ERROR, result={"error": str(exc)})
        return ToolOutcome(status=ToolRunStatus.OK, result={"value": value})

"""The server-side tools themselves: each one's function definition (what the model sees in `tools`), its
arguments' model, and its run, which returns what the model gets back and how the run went."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from functions.chat.server_tools.calculator import MAX_CHARS, CalculatorError, evaluate
from functions.chat.server_tools.sandboxing import (
    FileView,
    SandboxLimits,
    SandboxUnavailableError,
    bwrap_works,
    run_python,
)
from shared.server_tool_settings import ServerToolSettings
from shared.storage.tool_audit import ToolRunStatus


class ToolOutcome(BaseModel):
    status: ToolRunStatus
    result: dict[str, Any]  # what the model gets back (as JSON text in the `role: "tool"` message)
    exit_code: int | None = None
    # Whether this counts against the tool's breaker: the tool itself failed (a timeout, a sandbox that cannot
    # start), not the input it was given (a program that raises, an expression that does not parse).
    tool_failed: bool = False


class ServerTool(Protocol):
    name: str
    arguments: type[BaseModel]

    def definition(self) -> dict[str, Any]: ...

    def unavailable_reason(self) -> str | None:
        """Why the tool cannot run on this deployment (None: it can)."""
        ...

    async def run(self, arguments: Any) -> ToolOutcome: ...


def _function(name: str, description: str, arguments: type[BaseModel]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": arguments.model_json_schema()},
    }


class PythonArguments(BaseModel):
    model_config = ConfigDict(extra="forbid", title="python")

    code: str = Field(min_length=1, max_length=20_000, description="A complete Python 3 program; print() results.")


class PythonTool:
    """Python 3 (standard library only) in the bubblewrap sandbox; never run without it."""

    name = "python"
    arguments = PythonArguments

    def __init__(self, settings: ServerToolSettings, hidden: Sequence[Path]) -> None:
        self.limits = SandboxLimits(
            timeout_s=settings.python_timeout_s,
            memory_mb=settings.python_memory_mb,
            scratch_mb=settings.python_scratch_mb,
            output_bytes=settings.python_output_bytes,
        )
        self.hidden = list(hidden)

    def definition(self) -> dict[str, Any]:
        return _function(
            self.name,
            "Run a Python 3 program (standard library only) in a sandbox without network access and return its "
            f"exit code and printed output. Time limit {self.limits.timeout_s:g} s; only /tmp is writable.",
            self.arguments,
        )

    def unavailable_reason(self) -> str | None:
        if bwrap_works():
            return None
        return "the python tool is unavailable here: its sandbox (bubblewrap) is not installed or cannot run"

    async def run(self, arguments: PythonArguments) -> ToolOutcome:
        try:
            run = await run_python(arguments.code, self.limits, view=FileView.MINIMAL, hidden=self.hidden)
        except (SandboxUnavailableError, OSError) as exc:
            return ToolOutcome(status=ToolRunStatus.ERROR, result={"error": str(exc)}, tool_failed=True)
        result: dict[str, Any] = {"exit_code": run.exit_code, "output": run.output}
        if run.output_truncated:
            result["output_truncated"] = True
        if run.timed_out:
            result["error"] = f"killed at the time limit ({self.limits.timeout_s:g} s)"
            return ToolOutcome(status=ToolRunStatus.TIMEOUT, result=result, tool_failed=True)
        status = ToolRunStatus.OK if run.exit_code == 0 else ToolRunStatus.ERROR
        return ToolOutcome(status=status, result=result, exit_code=run.exit_code)


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

    async def run(self, arguments: CalculatorArguments) -> ToolOutcome:
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

"""The eval job's sandbox for a model's answer plus the item's tests: functions/chat/server_tools/sandboxing.py with the
host's file system visible read-only (the eval program may need what the interpreter's environment has), falling back to
rlimits and a temporary working directory where bubblewrap is missing; `isolation()` says which applies and the report
states it. The request path's python tool never falls back (it requires bubblewrap)."""

from __future__ import annotations

from pydantic import BaseModel

from functions.chat.server_tools.sandboxing import FileView, SandboxLimits, bwrap_works
from functions.chat.server_tools.sandboxing import run_python as run_sandboxed

OUTPUT_TAIL = 600  # characters of stdout+stderr kept for the report


class SandboxResult(BaseModel):
    passed: bool  # exit status 0 within the time limit
    timed_out: bool
    returncode: int | None
    output_tail: str
    isolation: str


def isolation() -> str:
    """'bwrap' when bubblewrap is installed and works here (user namespaces allowed), else 'rlimits'."""
    return "bwrap" if bwrap_works() else "rlimits"


def describe_isolation() -> str:
    if isolation() == "bwrap":
        return "bubblewrap: no network, read-only file system, private /tmp and PID namespace; rlimits"
    return "rlimits and a temporary working directory only: bubblewrap not available, network NOT blocked"


async def run_python(program: str, *, timeout_s: float = 10.0, memory_mb: int = 1024) -> SandboxResult:
    """Run `program` with this interpreter; passed when it exits 0 within `timeout_s`."""
    limits = SandboxLimits(timeout_s=timeout_s, memory_mb=memory_mb)
    run = await run_sandboxed(program, limits, view=FileView.HOST, require_bwrap=False)
    return SandboxResult(
        passed=run.ok,
        timed_out=run.timed_out,
        returncode=run.exit_code,
        output_tail=run.output[-OUTPUT_TAIL:],
        isolation=run.isolation,
    )

"""The eval job's sandbox for a model's answer plus the item's tests: the same runners as the python tool
(functions/sandbox/), bubblewrap with the host's file system visible read-only (the eval program may need what the
interpreter's environment has) on this machine, a Modal Sandbox deployed (gpu_workers/modal_app.py hands the job its
runner with `use_runner`). Where no runner can isolate the code it is not run: `run_python` raises
SandboxUnavailableError and the report says why (the job never runs a model's code unisolated)."""

from __future__ import annotations

from pydantic import BaseModel

from functions.sandbox.bubblewrap import BubblewrapRunner, FileView
from functions.sandbox.protocol import SandboxLimits, SandboxRunner, SandboxUnavailableError

OUTPUT_TAIL = 600  # characters of stdout+stderr kept for the report

_runner: SandboxRunner = BubblewrapRunner(FileView.HOST)


class SandboxResult(BaseModel):
    passed: bool  # exit status 0 within the time limit
    timed_out: bool
    returncode: int | None
    output_tail: str
    isolation: str


def use_runner(runner: SandboxRunner) -> None:
    """Run the eval's code in `runner` from now on (the deployed job's Modal Sandboxes)."""
    global _runner
    _runner = runner


def unavailable_reason() -> str | None:
    return _runner.unavailable_reason()


def describe_isolation() -> str:
    return _runner.describe()


async def run_python(program: str, *, timeout_s: float = 10.0, memory_mb: int = 1024) -> SandboxResult:
    """Run `program` isolated; passed when it exits 0 within `timeout_s`. SandboxUnavailableError: not run."""
    if (reason := _runner.unavailable_reason()) is not None:
        raise SandboxUnavailableError(reason)
    limits = SandboxLimits(timeout_s=timeout_s, memory_mb=memory_mb, sandbox_memory_mb=max(memory_mb, 1024))
    run = await _runner.run(program, limits)
    return SandboxResult(
        passed=run.ok,
        timed_out=run.timed_out,
        returncode=run.exit_code,
        output_tail=run.output[-OUTPUT_TAIL:],
        isolation=run.isolation,
    )

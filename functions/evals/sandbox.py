"""Run untrusted Python (a model's answer plus the item's tests) in a child process that cannot do much harm.

Isolation, best available: with bubblewrap (`bwrap`, Debian's `bubblewrap`) the child gets its own network namespace
with nothing in it (no network, not even the host's loopback), a read-only file system, an empty private /tmp and
its own PID namespace, and dies with us. Without it: a fresh temporary directory as the working directory, an empty
environment and Python's isolated mode, and nothing stops network access; `ISOLATION` says which applies. Both ways
the child runs in its own session (killed as a group on timeout) under rlimits: CPU seconds, address space, file
size, no core dumps.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel

OUTPUT_TAIL = 600  # characters of stdout+stderr kept for the report


class SandboxResult(BaseModel):
    passed: bool  # exit status 0 within the time limit
    timed_out: bool
    returncode: int | None
    output_tail: str
    isolation: str


def _bwrap_command(python: str, script_dir: str) -> list[str]:
    return [
        shutil.which("bwrap") or "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        "--ro-bind", script_dir, "/tmp/src",
        "--chdir", "/tmp",
        python, "-I", "/tmp/src/program.py",
    ]  # fmt: skip


@functools.cache
def isolation() -> str:
    """'bwrap' when bubblewrap is installed and works here (user namespaces allowed), else 'rlimits'."""
    if shutil.which("bwrap") is None:
        return "rlimits"
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "program.py").write_text("pass\n")
        probe = subprocess.run(_bwrap_command(sys.executable, tmp), capture_output=True, timeout=30, check=False)
    return "bwrap" if probe.returncode == 0 else "rlimits"


def describe_isolation() -> str:
    if isolation() == "bwrap":
        return "bubblewrap: no network, read-only file system, private /tmp and PID namespace; rlimits"
    return "rlimits and a temporary working directory only: bubblewrap not available, network NOT blocked"


def _limits(cpu_s: int, memory_mb: int) -> None:  # runs in the child before exec
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


async def run_python(program: str, *, timeout_s: float = 10.0, memory_mb: int = 1024) -> SandboxResult:
    """Run `program` with this interpreter; passed when it exits 0 within `timeout_s`."""
    mode = isolation()
    with tempfile.TemporaryDirectory(prefix="fleetchat-sandbox-") as tmp:
        Path(tmp, "program.py").write_text(program, encoding="utf-8")
        if mode == "bwrap":
            command = _bwrap_command(sys.executable, tmp)
        else:
            command = [sys.executable, "-I", str(Path(tmp, "program.py"))]
        proc = await asyncio.create_subprocess_exec(
            *command,
            cwd=tmp,
            env={"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=functools.partial(_limits, int(timeout_s) + 1, memory_mb),
        )
        timed_out = False
        try:
            output, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
        except TimeoutError:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            output, _ = await proc.communicate()
    text = output.decode("utf-8", errors="replace")
    return SandboxResult(
        passed=not timed_out and proc.returncode == 0,
        timed_out=timed_out,
        returncode=None if timed_out else proc.returncode,
        output_tail=text[-OUTPUT_TAIL:],
        isolation=mode,
    )

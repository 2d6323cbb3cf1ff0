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


# Sets the rlimits, then becomes the program: a launcher instead of `preexec_fn`, which is unsafe in a process with
# threads (the eval job runs beside an event loop and, in tests, uvicorn threads).
_LAUNCHER = (
    "import os, resource, sys\n"
    "cpu, memory = int(sys.argv[1]), int(sys.argv[2]) << 20\n"
    "resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))\n"
    "resource.setrlimit(resource.RLIMIT_AS, (memory, memory))\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))\n"
    "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "os.execv(sys.executable, [sys.executable, '-I', sys.argv[3]])\n"
)


def _python_command(python: str, program: str, cpu_s: int, memory_mb: int) -> list[str]:
    return [python, "-I", "-c", _LAUNCHER, str(cpu_s), str(memory_mb), program]


def _interpreter_dirs_under_tmp() -> list[str]:
    """The interpreter's own directories that live under /tmp (a checkout or venv there): the private /tmp would hide
    them, so they are bound back read-only."""
    found: list[str] = []
    for directory in sorted({sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent)}):
        resolved = str(Path(directory).resolve())
        if resolved == "/tmp" or not resolved.startswith("/tmp/"):
            continue
        if not any(resolved.startswith(parent + "/") for parent in found):
            found.append(resolved)
    return found


def _bwrap_command(script_dir: str, python_command: list[str]) -> list[str]:
    rebound = [arg for directory in _interpreter_dirs_under_tmp() for arg in ("--ro-bind", directory, directory)]
    return [
        shutil.which("bwrap") or "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        *rebound,
        "--ro-bind", script_dir, "/tmp/src",
        "--chdir", "/tmp",
        *python_command,
    ]  # fmt: skip


@functools.cache
def isolation() -> str:
    """'bwrap' when bubblewrap is installed and works here (user namespaces allowed), else 'rlimits'."""
    if shutil.which("bwrap") is None:
        return "rlimits"
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "program.py").write_text("pass\n")
        command = _bwrap_command(tmp, _python_command(sys.executable, "/tmp/src/program.py", 10, 1024))
        probe = subprocess.run(command, capture_output=True, timeout=30, check=False)
    return "bwrap" if probe.returncode == 0 else "rlimits"


def describe_isolation() -> str:
    if isolation() == "bwrap":
        return "bubblewrap: no network, read-only file system, private /tmp and PID namespace; rlimits"
    return "rlimits and a temporary working directory only: bubblewrap not available, network NOT blocked"


async def run_python(program: str, *, timeout_s: float = 10.0, memory_mb: int = 1024) -> SandboxResult:
    """Run `program` with this interpreter; passed when it exits 0 within `timeout_s`."""
    mode = isolation()
    with tempfile.TemporaryDirectory(prefix="fleetchat-sandbox-") as tmp:
        Path(tmp, "program.py").write_text(program, encoding="utf-8")
        cpu_s = int(timeout_s) + 1
        if mode == "bwrap":
            command = _bwrap_command(tmp, _python_command(sys.executable, "/tmp/src/program.py", cpu_s, memory_mb))
        else:
            command = _python_command(sys.executable, str(Path(tmp, "program.py")), cpu_s, memory_mb)
        proc = await asyncio.create_subprocess_exec(
            *command,
            cwd=tmp,
            env={"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
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

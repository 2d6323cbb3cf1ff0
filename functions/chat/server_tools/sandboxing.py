"""Run untrusted Python in a child process that cannot do much harm: bubblewrap isolation, rlimits, a hard timeout.

With bubblewrap (`bwrap`, Debian's `bubblewrap`) the child gets new namespaces of every kind (`--unshare-all`): a
network namespace with nothing in it (no network, not even the host's loopback), its own PID namespace (killing the
sandbox's bwrap kills everything in it, processes that left the process group included), and a file system of our
choosing, mounted read-only but for a size-bounded private /tmp (the scratch dir). Two views of the file system:

- `MINIMAL` (the request path's python tool): only the system's /usr, /bin, /lib* and the base interpreter's own
  prefix are bound; nothing else of the host exists inside: no data dir, no keys, no `.env`, no checkout, no /etc.
- `HOST` (the eval job): the whole host read-only, with the paths in `hidden` covered by empty tmpfs mounts.

Either way the child runs in its own session under rlimits (CPU seconds, address space, file size, no core dumps), with
an empty environment, and is killed as a group at its timeout. Without bubblewrap, `require_bwrap=False` (the eval job
only) runs the same launcher in a temporary working directory, which does NOT block the network or the file system;
the request path always requires bubblewrap (`SandboxUnavailableError`).
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
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, Field


class SandboxUnavailableError(RuntimeError):
    """Bubblewrap is missing or cannot create namespaces here: the sandboxed run is refused, never run unisolated."""


class FileView(StrEnum):
    MINIMAL = "minimal"
    HOST = "host"


class SandboxLimits(BaseModel):
    timeout_s: float = Field(default=10.0, gt=0, le=600)  # wall clock; then the whole sandbox is killed
    memory_mb: int = Field(default=1024, ge=32)  # address space per process
    file_size_mb: int = Field(default=16, ge=1)  # largest file it may write
    scratch_mb: int = Field(default=64, ge=1)  # size of the writable /tmp (bubblewrap only)
    output_bytes: int = Field(default=64 << 10, ge=256)  # stdout+stderr kept (head and tail); the rest is dropped


class SandboxRun(BaseModel):
    exit_code: int | None  # None: killed at the timeout
    timed_out: bool
    output: str  # stdout and stderr, interleaved; cut in the middle beyond `output_bytes`
    output_truncated: bool
    isolation: str  # "bwrap" or "rlimits"

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.exit_code == 0


# Sets the rlimits, then becomes the program: a launcher instead of `preexec_fn`, which is unsafe in a process with
# threads (the gateway's event loop and worker threads).
_LAUNCHER = (
    "import os, resource, sys\n"
    "cpu, memory, fsize = int(sys.argv[1]), int(sys.argv[2]) << 20, int(sys.argv[3]) << 20\n"
    "resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))\n"
    "resource.setrlimit(resource.RLIMIT_AS, (memory, memory))\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))\n"
    "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "os.execv(sys.executable, [sys.executable, '-I', sys.argv[4]])\n"
)
_SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/lib32", "/lib64", "/sbin")


def _launch(python: str, program: str, limits: SandboxLimits) -> list[str]:
    cpu_s = int(limits.timeout_s) + 1
    return [python, "-I", "-c", _LAUNCHER, str(cpu_s), str(limits.memory_mb), str(limits.file_size_mb), program]


def _interpreter(view: FileView) -> str:
    """The minimal view runs the base interpreter (the venv's symlink resolved: no site-packages, stdlib only)."""
    return str(Path(sys.executable).resolve()) if view is FileView.MINIMAL else sys.executable


def _interpreter_dirs(view: FileView) -> list[str]:
    """The directories the interpreter needs, outermost only (a pyenv prefix; for the host view's venv interpreter
    also the venv, which may live under /tmp)."""
    wanted = {sys.base_prefix, str(Path(sys.executable).resolve().parent.parent)}
    if view is FileView.HOST:
        wanted.add(sys.prefix)
    found: list[str] = []
    for directory in sorted(str(Path(d).resolve()) for d in wanted):
        if directory in ("/", "/tmp") or any(directory.startswith(parent + "/") for parent in found):
            continue
        found.append(directory)
    return found


def _under(path: str, parents: Sequence[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def bwrap_command(script_dir: str, view: FileView, hidden: Sequence[Path], limits: SandboxLimits) -> list[str]:
    """The bubblewrap command line that runs /tmp/src/program.py from `script_dir` under `view`."""
    launch = _launch(_interpreter(view), "/tmp/src/program.py", limits)
    interpreter = _interpreter_dirs(view)
    under_tmp = [d for d in interpreter if d.startswith("/tmp/")]  # bound after the private /tmp, which hides them
    if view is FileView.MINIMAL:
        system = [d for d in _SYSTEM_DIRS if Path(d).exists()]
        bound = [*system, *interpreter]
        binds = [arg for d in (*system, *interpreter) if d not in under_tmp for arg in ("--ro-bind", d, d)]
    else:
        bound = ["/", *under_tmp]
        binds = ["--ro-bind", "/", "/"]
    # A hidden path that exists inside a bound directory is covered by an empty tmpfs; any other does not exist
    # inside at all (the private /tmp starts empty).
    covers = [str(Path(p).resolve()) for p in hidden]
    visible = [
        p
        for p in covers
        if Path(p).exists() and _under(p, bound) and (not p.startswith("/tmp/") or _under(p, under_tmp))
    ]
    return [
        shutil.which("bwrap") or "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",  # no TIOCSTI into a terminal
        "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "PYTHONHASHSEED", "0",
        *binds,
        "--dev", "/dev",
        "--proc", "/proc",
        "--size", str(limits.scratch_mb << 20), "--tmpfs", "/tmp",
        *[arg for d in under_tmp for arg in ("--ro-bind", d, d)],
        "--ro-bind", script_dir, "/tmp/src",
        *[arg for p in visible for arg in ("--tmpfs", p)],
        "--remount-ro", "/",
        "--chdir", "/tmp",
        *launch,
    ]  # fmt: skip


@functools.cache
def bwrap_works() -> bool:
    """Whether bubblewrap is installed and can create its namespaces here (probed once per process)."""
    if shutil.which("bwrap") is None:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "program.py").write_text("pass\n")
        command = bwrap_command(tmp, FileView.MINIMAL, (), SandboxLimits())
        try:
            probe = subprocess.run(command, capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
    return probe.returncode == 0


class _Output:
    """stdout+stderr kept within a byte bound: the first half and the last half, the middle dropped."""

    def __init__(self, limit: int) -> None:
        self.limit, self.head, self.tail, self.dropped = limit, bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > self.limit // 2:
            cut = len(self.tail) - self.limit // 2
            self.dropped += cut
            del self.tail[:cut]

    def text(self) -> str:
        middle = f"\n[... {self.dropped} bytes of output dropped ...]\n".encode() if self.dropped else b""
        return bytes(self.head + middle + self.tail).decode("utf-8", errors="replace")


async def _drain(stream: asyncio.StreamReader, output: _Output) -> None:
    while chunk := await stream.read(1 << 16):
        output.add(chunk)


async def run_python(
    program: str,
    limits: SandboxLimits,
    *,
    view: FileView = FileView.MINIMAL,
    hidden: Sequence[Path] = (),
    require_bwrap: bool = True,
) -> SandboxRun:
    """Run `program` in the sandbox; its exit code, or `timed_out` when it was killed at `limits.timeout_s`."""
    isolated = bwrap_works()
    if not isolated and require_bwrap:
        raise SandboxUnavailableError("bubblewrap (bwrap) is not installed or cannot create namespaces here")
    with tempfile.TemporaryDirectory(prefix="fleetchat-sandbox-") as tmp:
        Path(tmp, "program.py").write_text(program, encoding="utf-8")
        if isolated:
            command = bwrap_command(tmp, view, hidden, limits)
        else:
            command = _launch(sys.executable, str(Path(tmp, "program.py")), limits)
        proc = await asyncio.create_subprocess_exec(
            *command,
            cwd=tmp,
            env={"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group, killed as one
        )
        output = _Output(limits.output_bytes)
        assert proc.stdout is not None
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.gather(_drain(proc.stdout, output), proc.wait()), limits.timeout_s)
        except TimeoutError:
            timed_out = True
        finally:  # also when the caller is cancelled (the client left): never leave the sandbox running
            if proc.returncode is None or timed_out:
                # bwrap is the group leader; SIGKILL on it ends its PID namespace, so every process inside dies too.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                await asyncio.shield(proc.wait())
    return SandboxRun(
        exit_code=None if timed_out else proc.returncode,
        timed_out=timed_out,
        output=output.text(),
        output_truncated=output.dropped > 0,
        isolation="bwrap" if isolated else "rlimits",
    )

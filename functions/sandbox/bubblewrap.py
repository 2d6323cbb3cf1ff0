"""The local runner: untrusted Python under bubblewrap, with whole-sandbox limits, a system-call filter and a hard
timeout.

With bubblewrap (`bwrap`, Debian's `bubblewrap`) the child gets new namespaces of every kind (`--unshare-all`): a
network namespace with nothing in it (no network, not even the host's loopback), its own PID namespace (killing the
sandbox's bwrap kills everything in it, processes that left the process group included), and a file system of our
choosing, mounted read-only but for a size-bounded private /tmp, /dev/shm and /mnt/data/out. Two views of it:

- `MINIMAL` (the request path's python tool): only the system's /usr, /bin, /lib* and the base interpreter's own
  prefix are bound; nothing else of the host exists inside: no data dir, no keys, no `.env`, no checkout, no /etc.
- `HOST` (the eval job): the whole host read-only, with the paths in `hidden` covered by empty tmpfs mounts.

Inside, the program runs as `nobody` with no capabilities, under the seccomp filter
(functions/sandbox/seccomp_policy.py), rlimits (CPU seconds, address space and file size per process, no core dumps,
`RLIMIT_NPROC`), an empty environment and in its own session. The sandbox as a whole has a process limit and a memory
limit (a control group per run, functions/sandbox/cgroups.py; where no hierarchy is writable and the gateway is not
root, `RLIMIT_NPROC` in the sandbox's own user namespace). Nothing runs when any of these cannot be had
(`SandboxUnavailableError`).

The files a run was given are read-only at /mnt/data; what it writes to /mnt/data/out is sent back after it exits by
the launcher (the program's parent inside the sandbox) over a pipe, within the limits on count and size.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from functions.sandbox.cgroups import Cgroups, RunGroup, find_cgroups
from functions.sandbox.launcher import launch_command
from functions.sandbox.outputs import BoundedOutput, OfferedFiles
from functions.sandbox.protocol import INPUT_DIR, OUTPUT_DIR, SandboxLimits, SandboxRun, SandboxUnavailableError
from functions.sandbox.seccomp_policy import seccomp_program


class FileView(StrEnum):
    MINIMAL = "minimal"
    HOST = "host"


SANDBOX_UID = 65534  # nobody, inside the sandbox's user namespace
# The host user a root gateway's sandboxes run as (nobody): a sandbox mapped to the host's root could write what root
# may write through the kernel's own files (/proc/sys/kernel/core_pattern, /proc/sysrq-trigger): a way out.
HOST_UID = 65534

_SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/lib32", "/lib64", "/sbin")
SYSTEM_PYTHON = "/usr/bin/python3"


def host_uid() -> int | None:
    """The host user bubblewrap runs as: HOST_UID when the gateway is root, else the gateway's own (None)."""
    return HOST_UID if os.geteuid() == 0 else None


def _reachable(path: Path, uid: int | None) -> bool:
    """Whether `uid` (a user with no groups) can reach and run `path`."""
    if uid is None:
        return path.exists()
    try:
        resolved = path.resolve(strict=True)
        for directory in resolved.parents:
            info = directory.stat()
            if not info.st_mode & (0o100 if info.st_uid == uid else 0o001):
                return False
        return resolved.stat().st_mode & 0o005 == 0o005
    except OSError:
        return False


@dataclass(frozen=True)
class Interpreter:
    path: str
    dirs: tuple[str, ...]  # directories to bind for it beyond the system's (outermost only)


def _own_dirs(view: FileView) -> tuple[str, ...]:
    """This interpreter's directories, outermost only (a pyenv prefix; for the host view's venv interpreter also the
    venv, which may live under /tmp)."""
    wanted = {sys.base_prefix, str(Path(sys.executable).resolve().parent.parent)}
    if view is FileView.HOST:
        wanted.add(sys.prefix)
    found: list[str] = []
    for directory in sorted(str(Path(d).resolve()) for d in wanted):
        if directory in ("/", "/tmp") or any(directory.startswith(parent + "/") for parent in found):
            continue
        found.append(directory)
    return tuple(found)


@functools.cache
def interpreter(view: FileView) -> Interpreter | None:
    """The Python the sandbox runs: the minimal view this process's base interpreter (the venv's symlink resolved: no
    site-packages, stdlib only), the host view its venv's; either where the sandbox's host user can reach it, else
    the system's python3 (stdlib only). None: no interpreter it can run."""
    own = str(Path(sys.executable).resolve()) if view is FileView.MINIMAL else sys.executable
    if _reachable(Path(own), host_uid()):
        return Interpreter(own, _own_dirs(view))
    if _reachable(Path(SYSTEM_PYTHON), host_uid()):
        return Interpreter(SYSTEM_PYTHON, ())
    return None


def _under(path: str, parents: Sequence[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def bwrap_command(
    run_dir: str,
    view: FileView,
    hidden: Sequence[Path],
    limits: SandboxLimits,
    *,
    seccomp_fd: int | None,
    files_fd: int,
) -> list[str]:
    """The bubblewrap command line that runs `run_dir`/src/program.py with `run_dir`/inputs at INPUT_DIR, under
    `view`; the launcher sends the offered files to `files_fd` (inherited: bubblewrap leaves it open)."""
    python = interpreter(view)
    if python is None:
        raise SandboxUnavailableError("no Python interpreter the sandbox's user can run")
    launch = launch_command(python.path, "/tmp/src/program.py", limits, files_fd=files_fd)
    interpreter_dirs = list(python.dirs)
    under_tmp = [d for d in interpreter_dirs if d.startswith("/tmp/")]  # bound after the private /tmp, which hides them
    if view is FileView.MINIMAL:
        system = [d for d in _SYSTEM_DIRS if Path(d).exists()]
        bound = [*system, *interpreter_dirs]
        binds = [arg for d in (*system, *interpreter_dirs) if d not in under_tmp for arg in ("--ro-bind", d, d)]
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
    out_mb = max(1, limits.out_files * limits.out_file_mb)
    return [
        shutil.which("bwrap") or "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",  # no TIOCSTI into a terminal
        "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
        "--cap-drop", "ALL",
        "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "PYTHONHASHSEED", "0",
        "--setenv", "HOME", "/tmp",
        *binds,
        "--dev", "/dev",
        "--size", str(limits.scratch_mb << 20), "--tmpfs", "/dev/shm",  # POSIX shared memory (multiprocessing), bounded
        "--remount-ro", "/dev",  # else an unbounded tmpfs the program could fill
        "--proc", "/proc",
        "--size", str(limits.scratch_mb << 20), "--tmpfs", "/tmp",
        *[arg for d in under_tmp for arg in ("--ro-bind", d, d)],
        "--ro-bind", str(Path(run_dir, "src")), "/tmp/src",
        "--size", "65536", "--tmpfs", "/mnt",  # the mount points below (the host view's / is read-only)
        "--ro-bind", str(Path(run_dir, "inputs")), INPUT_DIR,
        "--size", str(out_mb << 20), "--tmpfs", OUTPUT_DIR,
        "--remount-ro", "/mnt",
        *[arg for p in visible for arg in ("--tmpfs", p)],
        "--remount-ro", "/",
        "--chdir", "/tmp",
        *(["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []),
        *launch,
    ]  # fmt: skip


# Joins the run's control groups (its PID into each `cgroup.procs` named before `--`), then becomes the rest: every
# process of the sandbox is born inside the groups, with no window before their limits hold.
_JOIN = 'for f; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 125; shift; done; shift; exec "$@"'


def launched(group: RunGroup | None, command: list[str], uid: int | None) -> list[str]:
    """`command` (bubblewrap's) run as host user `uid` (None: as this process's), inside `group`'s control groups."""
    if uid is not None:  # joined as root first (the groups are root's), then root is dropped for good
        setpriv = shutil.which("setpriv") or "setpriv"
        command = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *command]
    if group is not None:
        command = ["/bin/sh", "-c", _JOIN, "sh", *group.procs_files, "--", *command]
    return command


def _prepare(run_dir: Path, program: str, inputs: Mapping[str, bytes]) -> None:
    """The run's program and inputs under `run_dir`, owned by the sandbox's host user (who binds them)."""
    (run_dir / "src").mkdir()
    (run_dir / "src" / "program.py").write_text(program, encoding="utf-8")
    (run_dir / "inputs").mkdir()
    (run_dir / "inputs" / "out").mkdir()  # the mount point of the output tmpfs under the read-only inputs
    for name, data in inputs.items():
        if "/" in name or name in ("", ".", "..", "out") or "\x00" in name:
            raise ValueError(f"not a plain input file name: {name!r}")
        (run_dir / "inputs" / name).write_bytes(data)
    if (uid := host_uid()) is not None:
        for path in (run_dir, *run_dir.rglob("*")):
            os.chown(path, uid, uid)


class ProcessLimit(StrEnum):
    CGROUP_V2 = "cgroup-v2"
    CGROUP_V1 = "cgroup-v1"
    # In the sandbox's own user namespace (it binds: its host user is never root); memory then per process only.
    RLIMIT_NPROC = "rlimit-nproc"


@functools.cache
def _cgroups() -> Cgroups | None:
    return find_cgroups()


def process_limit() -> ProcessLimit:
    """What holds a sandbox's process count (and, for a cgroup, its memory) here."""
    cgroups = _cgroups()
    if cgroups is not None:
        return ProcessLimit(f"cgroup-v{cgroups.version}")
    return ProcessLimit.RLIMIT_NPROC  # binds: the sandbox's host user is never root (host_uid)


@functools.cache
def bwrap_works() -> bool:
    """Whether bubblewrap is installed and can create its namespaces here (probed once per process)."""
    if shutil.which("bwrap") is None:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        _prepare(Path(tmp), "pass\n", {})
        read, write = os.pipe()
        try:
            sandbox = bwrap_command(tmp, FileView.MINIMAL, (), SandboxLimits(), seccomp_fd=None, files_fd=write)
            command = launched(None, sandbox, host_uid())
            probe = subprocess.run(command, capture_output=True, timeout=30, check=False, pass_fds=(write,))
        except (OSError, subprocess.TimeoutExpired, SandboxUnavailableError):
            return False
        finally:
            os.close(read)
            os.close(write)
    return probe.returncode == 0


@functools.cache
def _seccomp() -> bytes | str:
    try:
        return seccomp_program()
    except (ImportError, OSError, RuntimeError) as exc:
        return f"the system-call filter cannot be built ({type(exc).__name__}: {exc}); install libseccomp2"


def unavailable_reason() -> str | None:
    """Why no run can be isolated here (None: every lock holds)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed"
    if host_uid() is not None and shutil.which("setpriv") is None:
        return "a root gateway drops its sandboxes to nobody with setpriv (util-linux), which is not installed"
    if interpreter(FileView.MINIMAL) is None:
        return f"no Python interpreter the sandbox's user can run (this one, or {SYSTEM_PYTHON})"
    if not bwrap_works():
        return "bubblewrap (bwrap) cannot create its namespaces here"
    if isinstance(program := _seccomp(), str):
        return program
    return None


def _memfd(data: bytes) -> int:
    fd = os.memfd_create("fleetchat-seccomp", 0)  # not close-on-exec: bubblewrap reads it
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


async def _drain(stream: asyncio.StreamReader, output: BoundedOutput) -> None:
    while chunk := await stream.read(1 << 16):
        output.add(chunk)


async def _read_offered(stream: asyncio.StreamReader, limits: SandboxLimits) -> OfferedFiles:
    """The files the launcher sent, admitted within `limits` (its headers are trusted no further than that)."""
    offered = OfferedFiles(limits)
    while header_line := await stream.readline():
        try:
            header = json.loads(header_line)
            name, size, sent = str(header["name"]), int(header["size"]), bool(header["sent"])
        except (ValueError, KeyError, TypeError):
            break  # not the launcher's writing: nothing more is believed
        if size < 0 or (sent and size > limits.out_file_mb << 20):
            break
        data = await stream.readexactly(size) if sent else None
        if not header.get("regular", False):
            offered.dropped.append(f"{name}: not a regular file")
        elif offered.admits(name, size):
            if data is None:  # within the limits, yet not sent
                offered.dropped.append(f"{name}: not sent")
            else:
                offered.keep(name, data)
    while await stream.read(1 << 16):  # whatever follows what was believed: drained, so the launcher can exit
        pass
    return offered


class BubblewrapRunner:
    """The sandbox runner on this machine (functions/sandbox/protocol.py)."""

    def __init__(self, view: FileView = FileView.MINIMAL, hidden: Sequence[Path] = ()) -> None:
        self.view = view
        self.hidden = list(hidden)

    def unavailable_reason(self) -> str | None:
        return unavailable_reason()

    def describe(self) -> str:
        if (reason := unavailable_reason()) is not None:
            return f"unavailable: {reason}"
        python = interpreter(self.view)
        who = "nobody (on the host too)" if host_uid() is not None else "nobody (the gateway's user on the host)"
        return (
            f"bubblewrap: no network, read-only file system, private /tmp and PID namespace, {who} without "
            f"capabilities, seccomp filter, rlimits; whole-sandbox limits by {process_limit()}"
            f"{' (one core each, at a low CPU weight)' if (c := _cgroups()) is not None and c.cpu else ''}; "
            f"{python.path if python else 'no'} interpreter"
        )

    async def run(self, program: str, limits: SandboxLimits, inputs: Mapping[str, bytes] = {}) -> SandboxRun:
        if (reason := unavailable_reason()) is not None:
            raise SandboxUnavailableError(reason)
        seccomp = _seccomp()
        assert isinstance(seccomp, bytes)
        cgroups = _cgroups()
        with tempfile.TemporaryDirectory(prefix="fleetchat-sandbox-") as tmp:
            _prepare(Path(tmp), program, inputs)
            group = cgroups.new_run(limits.max_processes, limits.sandbox_memory_mb) if cgroups else None
            try:
                return await self._run(tmp, limits, seccomp, group)
            finally:
                if group is not None:
                    group.remove()

    async def _run(self, tmp: str, limits: SandboxLimits, seccomp: bytes, group: RunGroup | None) -> SandboxRun:
        filter_fd = _memfd(seccomp)
        files_read, files_write = os.pipe()
        try:
            sandbox = bwrap_command(tmp, self.view, self.hidden, limits, seccomp_fd=filter_fd, files_fd=files_write)
            command = launched(group, sandbox, host_uid())
            proc = await asyncio.create_subprocess_exec(
                *command,
                cwd=tmp,
                env={"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # its own process group, killed as one
                pass_fds=(filter_fd, files_write),
            )
        except BaseException:
            os.close(files_read)
            raise
        finally:
            os.close(filter_fd)
            os.close(files_write)
        output = BoundedOutput(limits.output_bytes)
        assert proc.stdout is not None
        timed_out = False
        offered = OfferedFiles(limits)
        transport: asyncio.BaseTransport | None = None
        deadline = asyncio.get_running_loop().time() + limits.timeout_s
        try:
            files_stream = asyncio.StreamReader(limit=1 << 20)
            transport, _ = await asyncio.get_running_loop().connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(files_stream), os.fdopen(files_read, "rb", buffering=0)
            )
            async with asyncio.timeout_at(deadline):
                try:
                    drained = asyncio.gather(
                        _drain(proc.stdout, output), _read_offered(files_stream, limits), proc.wait()
                    )
                    _, offered, _ = await drained
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
                    await proc.wait()  # the launcher died mid-file (the program killed it): no files, the exit stands
        except TimeoutError:
            timed_out = True
        finally:  # also when the caller is cancelled (the client left): never leave the sandbox running
            if transport is not None:
                transport.close()
            if proc.returncode is None or timed_out:
                # bwrap is the group leader; SIGKILL on it ends its PID namespace, so every process inside dies too.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                await asyncio.shield(proc.wait())
        limit = process_limit()
        return SandboxRun(
            exit_code=None if timed_out else proc.returncode,
            timed_out=timed_out,
            output=output.text(),
            output_truncated=output.dropped > 0,
            isolation=f"bwrap+{limit}",
            limits_hit=group.limits_hit() if group is not None else [],
            files=[] if timed_out else offered.files,
            files_dropped=[] if timed_out else offered.dropped,
        )

"""One `fleetchat up` per data dir: its lock, its state file, and the clean-up of processes an earlier one left behind.

- `up.lock` in the data dir is held (an OS file lock, via `filelock`) for the life of `fleetchat up`. The kernel drops
  it when the process dies, even on `kill -9`, so "held" means "a live `fleetchat up` uses this data dir": a second
  start is refused with the first one's pid and ports, read from
- `up.json`: the supervisor's pid and gateway port and each worker's pool, port, pid and command line, rewritten on
  every (re)start of a worker and removed on a clean stop.
- Workers of a dead supervisor (a `fleetchat up` that was killed where the parent-death signal does not reach, or an
  older version without it) still hold their ports. A start finds them by their exact command line (the worker
  command for that port, or the one `up.json` recorded), stops them (SIGTERM, then SIGKILL) and says so. A port held
  by anything else is never touched: the start is refused, naming the process.
"""

from __future__ import annotations

import contextlib
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

import psutil
from filelock import FileLock, Timeout
from pydantic import BaseModel, ValidationError

from functions.local_stack.supervisor import WorkerSpec

LOCK_NAME = "up.lock"
STATE_NAME = "up.json"
ORPHAN_STOP_GRACE_S = 5.0


class WorkerRecord(BaseModel):
    name: str
    pool: str
    port: int
    pid: int | None = None
    command: list[str]


class StackState(BaseModel):
    supervisor_pid: int
    started_at: datetime
    gateway_port: int
    workers: list[WorkerRecord]


class StackStartRefused(RuntimeError):
    """`fleetchat up` cannot start here; the message says why and what to do."""


class StackLock:
    """The data dir's lock and state file (see the module docstring)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.state_path = data_dir / STATE_NAME
        # fallback_to_soft=False: a lock file whose mere existence counts as held would outlive a `kill -9`.
        self._lock = FileLock(data_dir / LOCK_NAME, blocking=False, fallback_to_soft=False)

    def acquire(self) -> StackState | None:
        """Take the lock, or refuse if a live `fleetchat up` holds it. Returns the state an earlier, dead run left."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
        except Timeout:
            raise StackStartRefused(self._running_message()) from None
        return self.read_state()

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.state_path.unlink()
        self._lock.release()

    def read_state(self) -> StackState | None:
        try:
            return StackState.model_validate_json(self.state_path.read_text(encoding="utf-8"))
        except (OSError, ValidationError):
            return None

    def write_state(self, state: StackState) -> None:
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(state.model_dump_json(indent=2), encoding="utf-8")
        os.replace(tmp, self.state_path)  # readers never see half a file

    def _running_message(self) -> str:
        state = self.read_state()
        where = f"data dir {self.data_dir}"
        if state is None:
            return f"another `fleetchat up` is running on {where} (it holds {self.data_dir / LOCK_NAME}); stop it first"
        return (
            f"another `fleetchat up` (pid {state.supervisor_pid}, gateway port {state.gateway_port}, started "
            f"{state.started_at:%Y-%m-%d %H:%M:%S} UTC) is running on {where}; stop it first (Ctrl-C in its terminal "
            f"or `kill {state.supervisor_pid}`), or start this one with another --data-dir"
        )


def new_state(gateway_port: int, specs: list[WorkerSpec], pids: dict[str, int]) -> StackState:
    return StackState(
        supervisor_pid=os.getpid(),
        started_at=datetime.now(UTC),
        gateway_port=gateway_port,
        workers=[
            WorkerRecord(name=s.name, pool=s.pool, port=s.port, pid=pids.get(s.name), command=s.command) for s in specs
        ],
    )


def clean_orphan_workers(specs: list[WorkerSpec], previous: StackState | None) -> list[str]:
    """Stop worker processes an earlier, dead `fleetchat up` left running; return one line per process stopped.

    A process qualifies only by its command line: exactly a worker command this start would run for that port, or
    one the earlier run recorded in its state file. Refuses if such a worker still has a live `fleetchat up` parent."""
    wanted = {tuple(s.command[1:]): f"{s.name} (port {s.port})" for s in specs}
    for record in previous.workers if previous else []:
        wanted.setdefault(tuple(record.command[1:]), f"{record.name} (port {record.port})")
    orphans: list[tuple[psutil.Process, str]] = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if proc.pid == os.getpid() or len(cmdline) < 2 or tuple(cmdline[1:]) not in wanted:
            continue
        owner = _live_supervisor(proc)
        if owner is not None:
            raise StackStartRefused(
                f"worker {wanted[tuple(cmdline[1:])]} (pid {proc.pid}) belongs to a running `fleetchat up` "
                f"(pid {owner}) that holds no lock on this data dir (another data dir, or an older version); stop it"
            )
        orphans.append((proc, wanted[tuple(cmdline[1:])]))
    if not orphans:
        return []
    for proc, _ in orphans:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs([p for p, _ in orphans], timeout=ORPHAN_STOP_GRACE_S)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=ORPHAN_STOP_GRACE_S)
    earlier = f"earlier `fleetchat up` (pid {previous.supervisor_pid}, gone)" if previous else "earlier `fleetchat up`"
    return [
        f"stopped orphan worker {what}, pid {proc.pid}, left by an {earlier}"
        + (" (needed SIGKILL)" if proc in alive else "")
        for proc, what in orphans
    ]


def _live_supervisor(proc: psutil.Process) -> int | None:
    """The pid of a live `fleetchat up` that is `proc`'s parent, if any (an orphan's parent is init or a reaper)."""
    try:
        parent = proc.parent()
        if parent is None:
            return None
        args = parent.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    is_up = "up" in args and any(a.endswith(("functions.cli", "fleetchat")) for a in args)
    return parent.pid if is_up else None


def refuse_busy_ports(ports: dict[int, str]) -> None:
    """Refuse the start if any of `ports` (port -> what it is for) is taken, naming the process that holds it."""
    busy = [f"port {port} ({what}) is in use{_holder(port)}" for port, what in ports.items() if not _port_free(port)]
    if busy:
        raise StackStartRefused(
            "; ".join(busy) + ". Stop that process, or choose other ports (--port, FLEETCHAT_WORKER_BASE_PORT)."
        )


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        # As uvicorn binds: SO_REUSEADDR ignores connections lingering in TIME_WAIT, not a live listener.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _holder(port: int) -> str:
    try:
        connections = psutil.net_connections(kind="tcp")
        listeners = [c.pid for c in connections if c.laddr and c.laddr.port == port and c.status == "LISTEN"]
    except (psutil.AccessDenied, OSError):
        return ""
    for pid in listeners:
        if pid is None:
            continue
        try:
            return f" by pid {pid} ({' '.join(psutil.Process(pid).cmdline())[:200]})"
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return f" by pid {pid}"
    return ""

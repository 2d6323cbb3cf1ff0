"""Whole-sandbox limits from the kernel's control groups: one group per run with a process limit and a memory limit
for all its processes together, which limits it ran into, and its removal (anything left in it killed). Where the `cpu`
controller is there too, every sandbox runs at a low CPU weight under one parent (the gateway, the workers and the
machine's other work get most of the cores when they are busy) and each run gets at most one core.

cgroup v2 where this process's own group can delegate the `pids` and `memory` controllers to a child (a systemd unit
with `Delegate=yes`, a container given its own cgroup namespace); cgroup v1 where the `pids` and `memory` hierarchies
are mounted and writable (a root gateway on a v1 or hybrid host, as on the project's own machine). Where neither holds
`find_cgroups()` is None and the bubblewrap runner falls back to `RLIMIT_NPROC` inside the sandbox's own user
namespace (docs/sandbox.md "Process and memory limits").
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

BASE_NAME = "fleetchat-sandboxes"
_CONTROLLERS = ("pids", "memory")  # required
_OPTIONAL = ("cpu",)
CPU_PERIOD_US = 100_000


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file system type, super options) of every cgroup mount."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            dash = fields.index("-")
            fstype, options = fields[dash + 1], set(fields[dash + 3].split(","))
            if fstype in ("cgroup", "cgroup2"):
                found.append((fields[4], fstype, options))
    return found


def _own_paths() -> dict[str, str]:
    """This process's group in each hierarchy: controller (or "" for v2) -> path."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path
    return paths


def _write(path: Path, value: str) -> None:
    path.write_text(value)


@dataclass(frozen=True)
class RunGroup:
    """One run's group (a directory per hierarchy: one for v2; `pids`, `memory` and maybe `cpu` for v1)."""

    version: int
    directories: tuple[Path, ...]

    @property
    def procs_files(self) -> list[str]:
        """The files a process writes its PID to, to join the group (every hierarchy)."""
        return [str(d / "cgroup.procs") for d in self.directories]

    def limits_hit(self) -> list[str]:
        hit = []
        if self.version == 2:
            events = _counters(self.directories[0] / "pids.events")
            memory = _counters(self.directories[0] / "memory.events")
            if events.get("max", 0) > 0:
                hit.append("processes")
            if memory.get("oom_kill", 0) > 0 or memory.get("max", 0) > 0:
                hit.append("memory")
            return hit
        pids, memory = self.directories[:2]
        if _counters(pids / "pids.events").get("max", 0) > 0:
            hit.append("processes")
        failed = _read_int(memory / "memory.failcnt") or _read_int(memory / "memory.memsw.failcnt")
        if failed or _counters(memory / "memory.oom_control").get("oom_kill", 0) > 0:
            hit.append("memory")
        return hit

    def remove(self) -> None:
        """Kill whatever is still in the group, then remove it (the kernel frees a group once its last task is
        reaped, so removal is retried briefly)."""
        kill = self.directories[0] / "cgroup.kill"
        if self.version == 2 and kill.exists():  # kernel 5.14+: every process of the group at once
            with contextlib.suppress(OSError):
                _write(kill, "1")
        for directory in self.directories:
            for pid in _pids(directory):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        for directory in self.directories:
            while True:
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)


def _pids(directory: Path) -> list[int]:
    try:
        return [int(line) for line in (directory / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _counters(path: Path) -> dict[str, int]:
    counters: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                counters[name] = int(value)
    return counters


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return 0


@dataclass(frozen=True)
class Cgroups:
    """Where this process makes its runs' groups."""

    version: int
    parents: tuple[Path, ...]  # v2: (the delegated parent,); v1: (pids parent, memory parent[, cpu parent])
    cpu: bool = False  # whether runs are held to one core each, at a low CPU weight

    def new_run(self, max_processes: int, memory_mb: int) -> RunGroup:
        """A fresh group for one run, its limits written (raises OSError when the hierarchy refuses)."""
        name = f"run-{uuid.uuid4().hex[:16]}"
        memory = str(memory_mb << 20)
        directories = tuple(parent / name for parent in self.parents)
        group = RunGroup(self.version, directories)
        try:
            for directory in directories:
                directory.mkdir()
            if self.version == 2:
                (only,) = directories
                _write(only / "pids.max", str(max_processes))
                _write(only / "memory.max", memory)
                with contextlib.suppress(OSError):  # no swap accounting on this kernel: memory.max still holds
                    _write(only / "memory.swap.max", "0")
                if self.cpu:
                    _write(only / "cpu.max", f"{CPU_PERIOD_US} {CPU_PERIOD_US}")
            else:
                pids, mem = directories[:2]
                _write(pids / "pids.max", str(max_processes))
                _write(mem / "memory.limit_in_bytes", memory)
                with contextlib.suppress(OSError):  # swap accounting off: the memory limit alone holds
                    _write(mem / "memory.memsw.limit_in_bytes", memory)
                if self.cpu:
                    _write(directories[2] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
                    _write(directories[2] / "cpu.cfs_quota_us", str(CPU_PERIOD_US))
        except OSError:
            group.remove()
            raise
        return group


# The sandboxes' CPU weight against the machine's other work: one eighth of a default group (cgroup v1 cpu.shares
# 1024, v2 cpu.weight 100). Not idle priority: under sustained load that starves a run into its timeout.
SHARES_V1, WEIGHT_V2 = 128, 12


def _low_priority(parent: Path, version: int) -> bool:
    """Every sandbox under `parent` at a low CPU weight; whether the `cpu` controller took it."""
    with contextlib.suppress(OSError):  # not idle priority (a parent an earlier version left so)
        _write(parent / "cpu.idle", "0")
    try:
        _write(parent / ("cpu.weight" if version == 2 else "cpu.shares"), str(WEIGHT_V2 if version == 2 else SHARES_V1))
        return True
    except OSError:
        return False


def _v2() -> Cgroups | None:
    mount = next((point for point, fstype, _ in _mounts() if fstype == "cgroup2"), None)
    own = _own_paths().get("")
    if mount is None or own is None:
        return None
    here = Path(mount) / own.lstrip("/")
    try:
        available = set((here / "cgroup.controllers").read_text().split())
        if not set(_CONTROLLERS) <= available:
            return None
        wanted = [*_CONTROLLERS, *(c for c in _OPTIONAL if c in available)]
        parent = here / BASE_NAME
        parent.mkdir(exist_ok=True)
        # Delegating needs our own group free of processes unless it is the root ("no internal processes"): where
        # this fails, v2 is not ours to use.
        _write(here / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
    except OSError:
        return None
    return Cgroups(2, (parent,), cpu="cpu" in wanted and _low_priority(parent, 2))


def _v1_parent(controller: str) -> Path | None:
    own = _own_paths()
    mount = next((p for p, fstype, options in _mounts() if fstype == "cgroup" and controller in options), None)
    if mount is None or controller not in own:
        return None
    parent = Path(mount) / own[controller].lstrip("/") / BASE_NAME
    try:
        parent.mkdir(exist_ok=True)
    except OSError:
        return None
    return parent


def _v1() -> Cgroups | None:
    parents = [_v1_parent(controller) for controller in _CONTROLLERS]
    if any(parent is None for parent in parents):
        return None
    cpu = _v1_parent("cpu")
    if cpu is not None and _low_priority(cpu, 1):
        return Cgroups(1, (*parents, cpu), cpu=True)  # type: ignore[arg-type]
    return Cgroups(1, tuple(parents))  # type: ignore[arg-type]


def find_cgroups() -> Cgroups | None:
    """The hierarchy this process may limit its sandboxes with (v2 first), checked by making and removing a group."""
    for found in (_v2(), _v1()):
        if found is None:
            continue
        try:
            found.new_run(8, 64).remove()
        except OSError:
            continue
        return found
    return None

"""The control-group plumbing (functions/sandbox/cgroups.py) on a directory tree shaped like each hierarchy: a run's
group gets its limits written where v2 and v1 keep them, reads back which limits a run hit from the kernel's counters,
and is removed (the real kernel paths are exercised by tests/integration/sandbox/test_escapes.py where a hierarchy is
writable: v1 on the project's machine, so the v2 layout is checked here)."""

from __future__ import annotations

from pathlib import Path

from functions.sandbox.cgroups import CPU_PERIOD_US, Cgroups, RunGroup


def test_a_v2_run_group_gets_its_limits_and_reads_what_it_hit(tmp_path: Path) -> None:
    parent = tmp_path / "fleetchat-sandboxes"
    parent.mkdir()
    group = Cgroups(2, (parent,), cpu=True).new_run(max_processes=24, memory_mb=256)
    (only,) = group.directories
    assert (only / "pids.max").read_text() == "24"
    assert (only / "memory.max").read_text() == str(256 << 20) and (only / "memory.swap.max").read_text() == "0"
    assert (only / "cpu.max").read_text() == f"{CPU_PERIOD_US} {CPU_PERIOD_US}"
    assert group.procs_files == [str(only / "cgroup.procs")]
    assert group.limits_hit() == []
    (only / "pids.events").write_text("max 3\n")
    (only / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n")
    assert group.limits_hit() == ["processes", "memory"]
    for name in ("pids.max", "memory.max", "memory.swap.max", "cpu.max", "pids.events", "memory.events"):
        (only / name).unlink()  # a real group's files go with it; here they must go first
    group.remove()
    assert not only.exists()


def test_a_v1_run_group_spans_the_pids_memory_and_cpu_hierarchies(tmp_path: Path) -> None:
    parents = tuple(tmp_path / name / "fleetchat-sandboxes" for name in ("pids", "memory", "cpu"))
    for parent in parents:
        parent.mkdir(parents=True)
    group = Cgroups(1, parents, cpu=True).new_run(max_processes=8, memory_mb=64)
    pids, memory, cpu = group.directories
    assert (pids / "pids.max").read_text() == "8" and (memory / "memory.limit_in_bytes").read_text() == str(64 << 20)
    assert (cpu / "cpu.cfs_quota_us").read_text() == str(CPU_PERIOD_US)
    assert len(group.procs_files) == 3
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert group.limits_hit() == ["memory"]
    (pids / "pids.events").write_text("max 1\n")
    assert group.limits_hit() == ["processes", "memory"]


def test_a_group_the_hierarchy_refuses_is_not_left_half_made(tmp_path: Path) -> None:
    parent = tmp_path / "fleetchat-sandboxes"
    parent.mkdir()
    (parent / "run-x").mkdir()
    group = RunGroup(2, (parent / "run-x",))
    group.remove()
    assert not (parent / "run-x").exists()

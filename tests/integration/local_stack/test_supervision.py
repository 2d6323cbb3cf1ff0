"""`fleetchat up` supervises its workers, as real processes: a killed worker comes back and serves; SIGTERM stops every
child; `kill -9` of `fleetchat up` leaves nothing behind; one stack per data dir; orphans are cleaned, strangers not.

The workers here are stand-ins (tests/support/stand_ins/supervised_worker.py, through the test-only worker command
setting) so each start takes about a second; one test runs the real `fleetchat worker` to show it dies with its
supervisor too.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from openai import APIError, OpenAI

from functions.local_stack.supervisor import SupervisorPolicy, WorkerSpec, WorkerSupervisor
from tests.support.processes import REPO, ProcessGroup, free_port, free_ports, wait_http_ok

STAND_IN = ["{python}", "-m", "tests.support.stand_ins.supervised_worker", "--pool", "{pool}", "--port", "{port}"]


@dataclass
class Up:
    proc: subprocess.Popen[bytes]
    data_dir: Path
    port: int
    worker_port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def worker_pid(self, index: int = 0) -> int:
        state = json.loads((self.data_dir / "up.json").read_text())
        return int(state["workers"][index]["pid"])

    def replica(self, index: int = 0) -> str:
        """The answer of the stand-in replica `index` of the mini pool."""
        return f"mini:{self.worker_port + index}"

    def chat(self, text: str = "hello") -> str:
        key = (self.data_dir / "local_api_key").read_text().strip()
        client = OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, timeout=10)
        reply = client.chat.completions.create(model="mini", messages=[{"role": "user", "content": text}])
        return reply.choices[0].message.content or ""


def up_env(worker_port: int, command: list[str] | None) -> dict[str, str]:
    return {
        "FLEETCHAT_POOLS": '["mini"]',
        "FLEETCHAT_WORKER_BASE_PORT": str(worker_port),
        "FLEETCHAT_WORKER_URLS": "",  # empty is ignored: `up` serves its own workers
        "FLEETCHAT_LOCAL_WORKER_COMMAND": json.dumps(command) if command else "",
        "FLEETCHAT_EMBEDDING_POOLS": "[]",  # the chat workers' supervision (the embedding worker's: its own test)
    }


def spawn_up(
    group: ProcessGroup,
    data_dir: Path,
    *,
    command: list[str] | None = STAND_IN,
    port: int = 0,
    worker_port: int = 0,
    replicas: int = 1,
) -> Up:
    port = port or free_port()
    worker_port = worker_port or free_ports(replicas)
    name = f"up-{port}"
    args = ["up", "--port", str(port), "--data-dir", str(data_dir), "--replicas", str(replicas)]
    proc = group.spawn(name, args, env=up_env(worker_port, command))
    return Up(proc, data_dir, port, worker_port, group.logs / f"{name}.log")


def start_up(group: ProcessGroup, data_dir: Path, **kwargs: object) -> Up:
    up = spawn_up(group, data_dir, **kwargs)  # type: ignore[arg-type]
    wait_http_ok(f"{up.url}/healthz", up.proc, up.log, timeout_s=120)
    return up


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def survivors(pids: list[int], within_s: float) -> list[int]:
    deadline = time.monotonic() + within_s
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def fleetchat_processes(marker: str) -> list[int]:
    """Live processes whose command line mentions `marker` (a data dir or a worker port)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid != os.getpid() and marker in " ".join(proc.info.get("cmdline") or []) and alive(proc.pid):
            found.append(proc.pid)
    return found


@pytest.fixture
def group(tmp_path: Path) -> ProcessGroup:
    group = ProcessGroup(tmp_path / "logs")
    yield group
    group.stop()


def test_a_killed_worker_is_restarted_and_back_in_rotation_and_sigterm_stops_every_child(
    group: ProcessGroup, tmp_path: Path
) -> None:
    up = start_up(group, tmp_path / "data", replicas=2)
    assert {up.chat() for _ in range(4)} == {up.replica(0), up.replica(1)}  # round-robin without a conversation
    first = up.worker_pid(0)

    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 60
    seen: list[str] = []
    # The other replica serves meanwhile; within 60 s the restarted one answers again on its own port.
    # Paced under the tenant's requests-per-minute limit (300), so a slow restart on a busy machine is not read as
    # the limit's 429.
    while up.replica(0) not in seen[-1:] and time.monotonic() < deadline:
        try:
            seen.append(up.chat())
        except APIError as exc:
            seen.append(type(exc).__name__)
        time.sleep(0.3)
    assert seen[-1] == up.replica(0), (seen, up.output())
    second = up.worker_pid(0)
    assert second != first and alive(second)
    # The restart is named with its cause and count, on the console and in the worker's own log.
    while "healthy again after restart 1" not in up.output() and time.monotonic() < deadline:
        time.sleep(0.1)
    out = up.output()
    assert f"worker mini-0 (port {up.worker_port}, pid {first}): killed by signal SIGKILL; restart 1 in" in out
    assert f"restarted (restart 1) as pid {second}" in out
    assert "healthy again after restart 1; back in rotation" in out
    worker_log = (up.data_dir / "logs" / "worker-mini-0.log").read_text()
    assert "[supervisor" in worker_log and "killed by signal SIGKILL; restart 1" in worker_log

    other = up.worker_pid(1)
    up.proc.send_signal(signal.SIGTERM)
    assert up.proc.wait(timeout=30) == 0
    assert survivors([second, other], within_s=5) == []
    assert "fleetchat stopped (SIGTERM)" in up.output()
    assert not (up.data_dir / "up.json").exists()  # a clean stop leaves no stale state


def test_one_up_per_data_dir_and_kill_9_of_up_leaves_no_process(group: ProcessGroup, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = start_up(group, data_dir)
    worker = first.worker_pid()

    second = spawn_up(group, data_dir)  # other ports, same data dir
    assert second.proc.wait(timeout=60) == 1
    refusal = " ".join(second.output().split())  # rich wraps long lines
    assert f"another `fleetchat up` (pid {first.proc.pid}, gateway port {first.port}" in refusal
    assert "is running on data dir" in refusal
    assert alive(worker) and first.chat() == first.replica()  # the refused start touched nothing

    first.proc.kill()
    first.proc.wait()
    assert survivors([worker], within_s=5) == []
    assert fleetchat_processes(str(data_dir)) == [] and fleetchat_processes(f"--port {first.worker_port}") == []

    again = start_up(group, data_dir, port=first.port)
    assert again.chat() == again.replica()
    out = " ".join(again.output().split())
    assert "orphan" not in out  # nothing was left to clean, and the start says so
    assert f"an earlier `fleetchat up` (pid {first.proc.pid}) on this data dir did not stop cleanly" in out


def test_orphan_workers_are_cleaned_and_a_stranger_on_a_worker_port_is_refused(
    group: ProcessGroup, tmp_path: Path
) -> None:
    # A worker whose supervisor is gone (an older `fleetchat up`, or a platform without the parent-death signal).
    orphan_port = free_port()
    command = [part.format(python=sys.executable, pool="mini", port=orphan_port) for part in STAND_IN]
    orphan = subprocess.Popen(command, cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        wait_http_ok(f"http://127.0.0.1:{orphan_port}/health", orphan, tmp_path / "none.log", timeout_s=60)
        up = start_up(group, tmp_path / "data", worker_port=orphan_port)
        assert orphan.wait(timeout=10) is not None
        out = " ".join(up.output().split())
        assert f"stopped orphan worker mini-0 (port {orphan_port}), pid {orphan.pid}" in out
        assert up.worker_pid() != orphan.pid and up.chat() == up.replica()
    finally:
        if orphan.poll() is None:
            orphan.kill()

    # Anything else on a worker port is never killed: the start is refused, naming it.
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.listen()
        port = stranger.getsockname()[1]
        refused = spawn_up(group, tmp_path / "other", worker_port=port)
        assert refused.proc.wait(timeout=60) == 1
        message = " ".join(refused.output().split())
        assert f"port {port} (worker mini-0) is in use by pid {os.getpid()}" in message


def test_a_worker_that_cannot_start_stops_the_start_with_its_log(group: ProcessGroup, tmp_path: Path) -> None:
    failing = ["{python}", "-c", "import sys; print('no model for {pool}'); sys.exit(3)"]
    up = spawn_up(group, tmp_path / "data", command=failing)
    assert up.proc.wait(timeout=60) != 0
    out = " ".join(up.output().split())
    assert f"worker mini-0 (port {up.worker_port}) exited with code 3 while starting" in out
    assert "no model for mini" in out
    assert not (up.data_dir / "up.json").exists()


def test_a_crash_loop_backs_off_and_is_logged_as_one(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    crashing = [sys.executable, "-c", "import sys; print('engine exploded'); sys.exit(7)"]
    spec = WorkerSpec(pool="mini", index=0, port=free_port(), command=crashing, log_path=tmp_path / "w.log")
    policy = SupervisorPolicy(backoff_initial_s=0.05, backoff_max_s=0.2, poll_interval_s=0.02)
    supervisor = WorkerSupervisor([spec], policy)
    with caplog.at_level(logging.WARNING, logger="fleetchat.supervisor"):
        supervisor.start()
        supervisor.supervise()
        deadline = time.monotonic() + 30
        while supervisor.restarts()["mini-0"] < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        supervisor.stop()
    messages = [r.getMessage() for r in caplog.records]
    assert any("exited with code 7; restart 1 in" in m for m in messages)
    loops = [r for r in caplog.records if "crash loop" in r.getMessage()]
    assert loops and all(r.levelno == logging.ERROR for r in loops)
    assert "engine exploded" in loops[0].getMessage()  # the log tail says why
    assert "exited with code 7; restart 3 in" in spec.log_path.read_text()


def test_a_real_worker_dies_with_a_killed_fleetchat_up(group: ProcessGroup, tmp_path: Path) -> None:
    up = spawn_up(group, tmp_path / "data", command=None)  # `fleetchat worker`: it loads SmolLM2 for a while
    state = up.data_dir / "up.json"
    deadline = time.monotonic() + 60
    while not state.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    worker = up.worker_pid()
    time.sleep(3)  # past its start-up imports: parent death is armed, the model is still loading
    assert alive(worker), (up.data_dir / "logs" / "worker-mini-0.log").read_text()
    up.proc.kill()
    up.proc.wait()
    assert survivors([worker], within_s=5) == []


def test_a_worker_whose_supervisor_is_already_gone_exits_at_once() -> None:
    # The race parent death closes: the supervisor died between the fork and the arming (pid 1 is never our parent).
    probe = "from gpu_workers.server.parent_death import die_with_supervisor; die_with_supervisor(); print('armed')"
    env = {**os.environ, "FLEETCHAT_SUPERVISOR_PID": "1"}
    run = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=30)
    assert run.returncode == 1 and "armed" not in run.stdout
    env["FLEETCHAT_SUPERVISOR_PID"] = str(os.getpid())  # our child: its parent is the supervisor named
    run = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=30)
    assert run.returncode == 0 and "armed" in run.stdout


POLLING_CHILD = """
import os, pathlib, sys, time
from gpu_workers.server import parent_death
parent_death._start_parent_poll(int(os.environ["FLEETCHAT_SUPERVISOR_PID"]))
ready = pathlib.Path(sys.argv[1])
ready.with_suffix(".tmp").write_text(str(os.getpid()))
ready.with_suffix(".tmp").rename(ready)  # whole, or not there yet
time.sleep(60)
"""
PARENT = """
import os, subprocess, sys, time
env = {**os.environ, "FLEETCHAT_SUPERVISOR_PID": str(os.getpid())}
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], env=env)
time.sleep(60)
"""


def test_without_the_death_signal_a_worker_polls_its_parent_and_exits_soon_after_it(tmp_path: Path) -> None:
    """The fallback where prctl does not exist (macOS, BSD), forced here on Linux."""
    ready = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, POLLING_CHILD, str(ready)], cwd=REPO)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(ready.read_text())
        assert alive(child)
    finally:
        parent.kill()
        parent.wait()
    assert survivors([child], within_s=5) == []

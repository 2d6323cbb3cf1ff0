"""Supervision of the local worker processes: start them, restart one that exits, stop them all.

One background thread in the `fleetchat up` process (the gateway's process) owns every worker process:

- it spawns them, each in its own process group (a Ctrl-C in the terminal reaches only `fleetchat up`, which then
  stops the workers in order; a worker never sees the terminal's SIGINT and is never mistaken for a crash);
- a worker that exits (crash, OOM, `kill -9`) is started again on the same port after an exponential backoff with
  jitter (1 s, 2 s, 4 s ... capped at 30 s; the count resets once the worker has stayed healthy for a minute); every
  exit and restart is logged with its cause (exit code or signal) and count, to the console and to the worker's own
  log, and a crash loop is logged as an error with the tail of the worker's log;
- on stop it sends SIGTERM to every worker's process group, waits a grace period, then SIGKILL.

Why a thread and not a task on uvicorn's event loop: the workers must be started (and their model load watched)
before uvicorn runs and stopped after it returns, so their lifetime is not the loop's; process calls (fork, wait,
health polls) block, and a thread keeps them off the request path. It must also be one long-lived thread: Linux's
parent-death signal (gpu_workers/server/parent_death.py) fires when the *thread* that forked a worker exits, so the
thread that spawns the workers lives until they are stopped.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from pydantic import BaseModel, Field

from gpu_workers.server.parent_death import SUPERVISOR_PID_ENV

log = logging.getLogger("fleetchat.supervisor")


class SupervisorPolicy(BaseModel):
    backoff_initial_s: float = Field(default=1.0, gt=0)
    backoff_max_s: float = Field(default=30.0, gt=0)
    healthy_reset_s: float = Field(default=60.0, gt=0)  # healthy this long: the next exit starts the backoff over
    crash_loop_after: int = Field(default=3, ge=1)  # this many exits without a healthy minute is a crash loop
    startup_timeout_s: float = Field(default=600.0, gt=0)  # a (re)started worker not healthy by then is killed
    stop_grace_s: float = Field(default=10.0, gt=0)  # SIGTERM, then SIGKILL after this
    poll_interval_s: float = Field(default=0.5, gt=0)


class WorkerSpec(BaseModel):
    """One worker replica: what to run, where it listens, where its output goes."""

    pool: str
    index: int
    port: int
    command: list[str]
    log_path: Path

    @property
    def name(self) -> str:
        return f"{self.pool}-{self.index}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class _Slot:
    spec: WorkerSpec
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    healthy_since: float | None = None
    next_start_at: float | None = None
    restarts: int = 0  # every restart since `fleetchat up` started
    failures: int = 0  # exits since it last stayed healthy: the backoff exponent
    exits: list[str] = field(default_factory=list)  # why it exited, latest last


class WorkerExitedDuringStartup(RuntimeError):
    pass


def backoff_delay(failures: int, policy: SupervisorPolicy, rng: random.Random) -> float:
    """Seconds before restart number `failures` (1-based): exponential, capped, with "equal jitter" (half fixed, half
    random) so replicas that died together do not all come back in the same instant."""
    ceiling = min(policy.backoff_max_s, policy.backoff_initial_s * 2 ** max(0, failures - 1))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


class WorkerSupervisor:
    """Starts `specs` on `start()`; restarts exits once `supervise()` is called; `stop()` stops them all."""

    def __init__(
        self,
        specs: list[WorkerSpec],
        policy: SupervisorPolicy | None = None,
        *,
        on_pids: Callable[[dict[str, int]], None] | None = None,
        rng: random.Random | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`env`: variables every worker gets on top of this process's environment (the stack's worker key)."""
        self.policy = policy or SupervisorPolicy()
        self._env = dict(env or {})
        self._slots = [_Slot(spec) for spec in specs]
        self._on_pids = on_pids
        self._rng = rng or random.Random()
        self._restarting = threading.Event()  # off while starting up: a worker that cannot start stops the start
        self._stopping = threading.Event()
        self._started = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="worker-supervisor", daemon=True)
        self._health = httpx.Client(timeout=1.0)
        self._start_failure: OSError | None = None

    # ## API for the launcher (main thread)

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def supervise(self) -> None:
        """From now on a worker that exits is restarted."""
        self._restarting.set()

    def healthy(self) -> set[str]:
        """Names of the workers whose health check has passed since their last start."""
        with self._lock:
            return {s.spec.name for s in self._slots if s.healthy_since is not None}

    def pids(self) -> dict[str, int]:
        with self._lock:
            return {s.spec.name: s.proc.pid for s in self._slots if s.proc is not None}

    def restarts(self) -> dict[str, int]:
        with self._lock:
            return {s.spec.name: s.restarts for s in self._slots}

    def check_startup(self) -> None:
        """Raise if a worker exited before it was ever healthy and restarts are not on yet (fail fast at start)."""
        if self._start_failure is not None:
            raise WorkerExitedDuringStartup(f"could not start the workers: {self._start_failure}")
        with self._lock:
            for slot in self._slots:
                if slot.proc is None and slot.exits and not self._restarting.is_set():
                    tail = _log_tail(slot.spec.log_path)
                    raise WorkerExitedDuringStartup(
                        f"worker {slot.spec.name} (port {slot.spec.port}) {slot.exits[-1]} while starting; "
                        f"its log {slot.spec.log_path} ends with:\n{tail}"
                    )

    def stop(self) -> None:
        """Stop every worker (SIGTERM, SIGKILL after the grace period) and the supervision thread."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        self._health.close()

    # ## The supervision thread

    def _run(self) -> None:
        try:
            for slot in self._slots:
                self._spawn(slot)
        except OSError as exc:  # not even a process (a missing interpreter, no file descriptors left)
            self._start_failure = exc
            self._stopping.set()
        finally:
            self._started.set()
        while not self._stopping.wait(self.policy.poll_interval_s):
            for slot in self._slots:
                try:
                    self._tick(slot, time.monotonic())
                except Exception:  # one bad tick must not end supervision of every worker
                    log.exception("supervising worker %s failed; retrying", slot.spec.name)
        self._stop_all()

    def _tick(self, slot: _Slot, now: float) -> None:
        if slot.proc is None:
            if slot.next_start_at is not None and now >= slot.next_start_at and self._restarting.is_set():
                try:
                    self._spawn(slot)
                except OSError as exc:  # counts as an exit: the backoff applies, the log says why
                    self._exited(slot, f"could not be started ({exc})", now)
            return
        code = slot.proc.poll()
        if code is not None:
            self._exited(slot, describe_exit(code), now)
            return
        if slot.healthy_since is None:
            if self._is_healthy(slot.spec):
                with self._lock:
                    slot.healthy_since = now
                if slot.restarts:
                    self._report(slot, f"healthy again after restart {slot.restarts}; back in rotation")
            elif now - slot.started_at > self.policy.startup_timeout_s:
                self._report(slot, f"not healthy {self.policy.startup_timeout_s:.0f}s after start; killing it")
                _signal_group(slot.proc, signal.SIGKILL)
        elif slot.failures and now - slot.healthy_since >= self.policy.healthy_reset_s:
            slot.failures = 0  # stable again: a later exit starts the backoff from the beginning

    def _exited(self, slot: _Slot, why: str, now: float) -> None:
        if not self._restarting.is_set():
            self._report(slot, f"{why} during start-up", level=logging.ERROR)
            self._forget_process(slot, why)
            return
        slot.failures += 1
        slot.restarts += 1
        delay = backoff_delay(slot.failures, self.policy, self._rng)
        slot.next_start_at = now + delay
        message = f"{why}; restart {slot.restarts} in {delay:.1f}s"
        if slot.failures >= self.policy.crash_loop_after:
            message += (
                f" (crash loop: {slot.failures} exits without a healthy {self.policy.healthy_reset_s:.0f}s; "
                f"log tail:\n{_log_tail(slot.spec.log_path)})"
            )
            self._report(slot, message, level=logging.ERROR)
        else:
            self._report(slot, message)
        self._forget_process(slot, why)

    def _forget_process(self, slot: _Slot, why: str) -> None:
        with self._lock:
            slot.proc = None
            slot.healthy_since = None
            slot.exits.append(why)

    def _spawn(self, slot: _Slot) -> None:
        spec = slot.spec
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self._env, SUPERVISOR_PID_ENV: str(os.getpid())}
        with open(spec.log_path, "ab") as out:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                spec.command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                process_group=0,  # its own group: see the module docstring
            )
        with self._lock:
            slot.proc = proc
            slot.started_at = time.monotonic()
            slot.next_start_at = None
        if slot.restarts:
            self._report(slot, f"restarted (restart {slot.restarts}) as pid {proc.pid}")
        if self._on_pids is not None:
            try:
                self._on_pids(self.pids())
            except Exception:  # the state file is bookkeeping: the worker runs and stays supervised regardless
                log.exception("recording the worker pids failed")

    def _is_healthy(self, spec: WorkerSpec) -> bool:
        try:
            return self._health.get(f"{spec.url}/health").status_code == 200
        except httpx.HTTPError:
            return False

    def _stop_all(self) -> None:
        running = [s for s in self._slots if s.proc is not None and s.proc.poll() is None]
        if running:
            log.warning("stopping %d worker(s): SIGTERM, SIGKILL after %.0fs", len(running), self.policy.stop_grace_s)
        for slot in running:
            _signal_group(slot.proc, signal.SIGTERM)  # type: ignore[arg-type]
        deadline = time.monotonic() + self.policy.stop_grace_s
        for slot in running:
            assert slot.proc is not None
            try:
                slot.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._report(slot, f"did not stop within {self.policy.stop_grace_s:.0f}s of SIGTERM; SIGKILL")
                _signal_group(slot.proc, signal.SIGKILL)
                slot.proc.wait()

    def _report(self, slot: _Slot, message: str, *, level: int = logging.WARNING) -> None:
        pid = f"pid {slot.proc.pid}" if slot.proc is not None else "no process"
        line = f"worker {slot.spec.name} (port {slot.spec.port}, {pid}): {message}"
        log.log(level, line)
        try:  # the worker's own log tells the same story as the console
            with open(slot.spec.log_path, "a", encoding="utf-8") as out:
                out.write(f"[supervisor {time.strftime('%Y-%m-%dT%H:%M:%S')}] {line}\n")
        except OSError:
            pass


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)  # the worker leads its own group: this reaches anything it started too
    except ProcessLookupError:
        pass  # already gone
    except PermissionError:
        proc.send_signal(sig)


def _log_tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])

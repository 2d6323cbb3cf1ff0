"""The faults a chaos run injects into its fleet's real processes and files, on a schedule relative to the load's
start, each recorded with when it began and ended."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable

from pydantic import BaseModel

from functions.offline.chaos.fleet import ChaosFleet
from functions.offline.chaos.plan import Fault, FaultKind


class FaultEvent(BaseModel):
    kind: FaultKind
    target: str
    at_s: float  # seconds after the load started
    until_s: float
    detail: str


def inject(fault: Fault, fleet: ChaosFleet) -> str:
    """Do it (blocking for a pause's or a lock's hold); what was done, in words."""
    if fault.kind in (FaultKind.GATEWAY, FaultKind.WORKER):
        pid = fleet.pid(fault.target)
        os.kill(pid, signal.SIGKILL)
        return f"SIGKILL to {fault.target} (pid {pid}); its supervisor restarts it"
    if fault.kind is FaultKind.CONTROL_STATE:
        process = fleet.redis.process
        process.send_signal(signal.SIGSTOP)
        try:
            time.sleep(fault.hold_s)
        finally:
            process.send_signal(signal.SIGCONT)
        return f"SIGSTOP to redis-server (pid {process.pid}) for {fault.hold_s:g} s, then SIGCONT"
    return lock_database(fleet.data_dir / fault.target, fault.hold_s)


def lock_database(path: os.PathLike[str], hold_s: float) -> str:
    """Hold an exclusive transaction on a SQLite file: every other writer waits (or times out) until it ends."""
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        db.execute("BEGIN EXCLUSIVE")
        time.sleep(hold_s)
        db.execute("ROLLBACK")
    finally:
        db.close()
    return f"exclusive transaction on {os.fspath(path)} for {hold_s:g} s"


class FaultSchedule(threading.Thread):
    """Injects `faults` at their times after `start()` (a thread: a pause holds while the load goes on)."""

    def __init__(
        self,
        faults: list[Fault],
        fleet: ChaosFleet,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_event: Callable[[FaultEvent], None] | None = None,
    ) -> None:
        super().__init__(name="chaos-faults", daemon=True)
        self.faults = faults
        self.fleet = fleet
        self.clock = clock
        self.on_event = on_event
        self.events: list[FaultEvent] = []
        self.errors: list[str] = []
        self.t0 = 0.0
        self._stop_event = threading.Event()

    def begin(self, t0: float) -> None:
        self.t0 = t0
        self.start()

    def cancel(self) -> None:
        """No fault after this one (the load ended first)."""
        self._stop_event.set()

    def run(self) -> None:
        for fault in self.faults:
            wait = self.t0 + fault.at_s - self.clock()
            if wait > 0 and self._stop_event.wait(wait):
                return
            began = self.clock() - self.t0
            try:
                detail = inject(fault, self.fleet)
            except Exception as exc:  # recorded: the report says which fault did not happen
                self.errors.append(f"{fault.kind} on {fault.target}: {type(exc).__name__}: {exc}")
                continue
            event = FaultEvent(
                kind=fault.kind, target=fault.target, at_s=began, until_s=self.clock() - self.t0, detail=detail
            )
            self.events.append(event)
            if self.on_event is not None:
                self.on_event(event)

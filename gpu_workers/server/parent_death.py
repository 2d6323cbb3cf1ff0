"""A supervised worker dies with its supervisor, even when the supervisor is killed with SIGKILL.

`fleetchat up` starts each worker with `FLEETCHAT_SUPERVISOR_PID` in its environment; the worker calls
`die_with_supervisor()` first thing. Without it, a `kill -9` of `fleetchat up` leaves the workers running, holding their
ports (the next start would find them there).

- Linux: `prctl(PR_SET_PDEATHSIG, SIGKILL)`: the kernel kills the worker when its parent goes. The signal is tied to
  the parent *thread* that forked the child, so the supervisor spawns every worker from one thread that outlives them.
  Between the fork and this call the parent may already have died (the worker is then re-parented, and the death
  signal would never come): re-checking `getppid()` right after arming closes that race.
- elsewhere (macOS, BSD): no such call; a daemon thread polls `getppid()` once a second and exits the process when
  the parent changes (re-parenting to init or a subreaper), so an orphan lives at most about a second.

A worker started by hand (no `FLEETCHAT_SUPERVISOR_PID`) is left alone: it should outlive the shell that started it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading

SUPERVISOR_PID_ENV = "FLEETCHAT_SUPERVISOR_PID"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
POLL_INTERVAL_S = 1.0


def die_with_supervisor(environ: dict[str, str] | None = None) -> str:
    """Arm parent-death for a supervised worker; return how (for the worker's log). Exits at once if the supervisor
    named in the environment is already gone."""
    value = (os.environ if environ is None else environ).get(SUPERVISOR_PID_ENV)
    if not value:
        return "not supervised"
    supervisor = int(value)
    how = _arm_pdeathsig() if sys.platform.startswith("linux") else None
    if how is None:
        _start_parent_poll(supervisor)
        how = "polling the parent pid"
    if os.getppid() != supervisor:  # the supervisor died before the death signal was armed
        os._exit(1)
    return how


def _arm_pdeathsig() -> str | None:
    libc_name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(libc_name, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return None
    except (OSError, AttributeError):  # no libc or no prctl (a sandbox, musl without the symbol): fall back
        return None
    return "prctl(PR_SET_PDEATHSIG, SIGKILL)"


def _start_parent_poll(supervisor: int) -> None:
    def watch() -> None:
        while True:
            if os.getppid() != supervisor:
                os._exit(1)  # nobody is left to read what a graceful shutdown would write
            threading.Event().wait(POLL_INTERVAL_S)

    threading.Thread(target=watch, name="parent-death-poll", daemon=True).start()

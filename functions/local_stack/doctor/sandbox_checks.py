"""The code sandbox: whether the python tool's runner can isolate a run here, and what holds it (docs/sandbox.md)."""

from __future__ import annotations

from functions.local_stack.doctor.results import CheckResult, fail, ok, warn
from functions.sandbox.bubblewrap import BubblewrapRunner, ProcessLimit, process_limit
from shared.settings import Settings

INSTALL_HINT = "apt-get install bubblewrap libseccomp2 util-linux (setpriv), or set server_tools.sandbox.runner: modal"


def check_sandbox(settings: Settings) -> list[CheckResult]:
    """The configured runner: bubblewrap is probed with a real run; Modal Sandboxes are the Modal app's to make."""
    runner = settings.server_tools.sandbox.runner
    if runner == "modal" or (runner == "auto" and settings.environment == "deployed"):
        return [ok("sandbox", "runner", "a Modal Sandbox per run (made by the Modal app; not made by this check)")]
    local = BubblewrapRunner()
    if (reason := local.unavailable_reason()) is not None:
        return [fail("sandbox", "runner", f"the python tool is refused: {reason}", INSTALL_HINT)]
    if process_limit() is ProcessLimit.RLIMIT_NPROC:
        return [warn("sandbox", "runner", local.describe() + " (memory bounded per process only)",
                     "give the gateway a cgroup it may delegate (systemd Delegate=yes) for a whole-sandbox memory "
                     "limit")]  # fmt: skip
    return [ok("sandbox", "runner", local.describe())]

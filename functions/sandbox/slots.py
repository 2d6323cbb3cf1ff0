"""How many sandboxes run at once: a bound per tenant (a lease in the shared control state, so every gateway replica
counts one number) and a bound per machine (a lock file per place, shared by every process on the machine and freed by
the kernel when its holder dies). A run waits a little for a place, then is refused with a 429 `sandbox_busy`."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from shared.errors import RateLimitError
from shared.storage.control_state import ControlState
from shared.storage.conversations import StoreUnavailableError

log = logging.getLogger("fleetchat.sandbox")

POLL_S = 0.05


class SandboxBusyError(RateLimitError):
    """Every sandbox place the run may use is taken (the tenant's, or the machine's)."""

    def __init__(self, message: str, *, retry_after_s: float, **kwargs: Any) -> None:
        super().__init__(message, limit_type="requests", retry_after_s=retry_after_s, code="sandbox_busy", **kwargs)


class MachineSlots:
    """At most `size` sandboxes at once on this machine, across processes: place i is held by whoever holds an
    exclusive `flock` on `directory`/slot-i."""

    def __init__(self, directory: Path, size: int) -> None:
        self.directory = directory
        self.size = size
        directory.mkdir(parents=True, exist_ok=True)

    def try_acquire(self) -> int | None:
        """A held place's open file (close it to free the place); None when all are taken."""
        for place in range(self.size):
            fd = os.open(self.directory / f"slot-{place}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return fd
        return None


class SandboxSlots:
    def __init__(
        self,
        machine: MachineSlots | None,
        state: ControlState | None,
        *,
        per_tenant: int,
        queue_s: float,
        lease_s: float,
    ) -> None:
        self.machine = machine
        self.state = state
        self.per_tenant = per_tenant
        self.queue_s = queue_s
        self.lease_s = lease_s  # longer than any run: a dead gateway's places come back after this

    @contextlib.asynccontextmanager
    async def held(self, tenant_id: str) -> AsyncIterator[None]:
        """Hold one of the tenant's places and one of the machine's for the block; SandboxBusyError when either stays
        taken for `queue_s`."""
        holder = uuid.uuid4().hex
        scope = f"sandbox:tenant:{tenant_id}"
        deadline = time.monotonic() + self.queue_s
        leased = False
        fd: int | None = None
        try:
            while not (leased := await self._lease(scope, holder)):
                if time.monotonic() >= deadline:
                    raise SandboxBusyError(
                        f"This tenant's {self.per_tenant} code sandboxes are all running; retry when one finishes.",
                        retry_after_s=1.0,
                    )
                await asyncio.sleep(POLL_S)
            while self.machine is not None and (fd := self.machine.try_acquire()) is None:
                if time.monotonic() >= deadline:
                    raise SandboxBusyError(
                        f"All {self.machine.size} code sandboxes of this machine are running; retry in a moment.",
                        retry_after_s=1.0,
                    )
                await asyncio.sleep(POLL_S)
            yield
        finally:
            if fd is not None:
                os.close(fd)  # frees the machine's place
            if leased and self.state is not None:
                with contextlib.suppress(StoreUnavailableError):
                    await self.state.release_lease(scope, holder)

    async def _lease(self, scope: str, holder: str) -> bool:
        if self.state is None:
            return True
        try:
            return await self.state.acquire_lease(scope, holder, self.per_tenant, self.lease_s)
        except StoreUnavailableError:
            # As admission does: a store that cannot answer now does not stop the service (the machine's bound and
            # every run's limits still hold).
            log.warning("control state unavailable: a sandbox run was not counted against its tenant")
            return True

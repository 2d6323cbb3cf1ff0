"""The gateway's place in the fleet: its instance id, its heartbeat in the shared control state, which other gateways
are alive, and the loop that brings shared decisions in (and this gateway's out) every `sync_s`.

Components register a step (`every_sync`): the streams' stop requests, canary rollbacks, brownout pressure. A step
that fails (the store is unreachable) is counted and retried next round; the gateway keeps serving on what it knew,
so a short outage of the store delays agreement, never a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from shared.settings import ControlStateSettings
from shared.storage.control_state import ControlState

log = logging.getLogger("fleetchat.fleet")

FLEET_SYNC_FAILURES = "fleetchat_gateway_fleet_sync_failures"  # exposed as ..._total
FLEET_GATEWAYS = "fleetchat_gateway_fleet_gateways"

# The namespace of gateway heartbeats: key = instance id, value = {"at": unix seconds, "pid": ...}.
GATEWAYS = "gateways"

SyncStep = Callable[[], Awaitable[None]]


class FleetMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.failures = Counter(
            FLEET_SYNC_FAILURES,
            "Rounds of a fleet sync step that failed (the shared control state unreachable), by step.",
            ["step"],
            registry=registry,
        )
        self.gateways = Gauge(
            FLEET_GATEWAYS, "Gateway replicas seen alive in the shared control state.", registry=registry
        )


def new_instance_id() -> str:
    """This gateway process's id in the fleet (never reused: a restarted gateway is a new member)."""
    return f"gw-{uuid.uuid4().hex[:16]}"


class FleetSync:
    def __init__(
        self,
        state: ControlState,
        settings: ControlStateSettings,
        metrics: FleetMetrics,
        *,
        instance_id: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self.settings = settings
        self.metrics = metrics
        self.instance_id = instance_id or new_instance_id()
        self.clock = clock
        self._steps: list[tuple[str, SyncStep]] = [("heartbeat", self._beat)]
        self._alive: set[str] = {self.instance_id}

    def every_sync(self, name: str, step: SyncStep) -> None:
        """Run `step` every round (after the heartbeat, in registration order)."""
        self._steps.append((name, step))

    async def joined(self, name: str, step: SyncStep) -> None:
        """Run `step` once now (what the fleet decided holds from this gateway's first request), then every round."""
        self.every_sync(name, step)
        await self._run(name, step)

    @property
    def size(self) -> int:
        """Gateway replicas alive as of the last round, this one included."""
        return len(self._alive)

    def seen_alive(self, instance_id: str) -> bool:
        """Whether that gateway was alive as of the last round (this one always is)."""
        return instance_id in self._alive

    async def members(self) -> set[str]:
        """The gateways alive now, read from the store, this one included."""
        return set(await self.state.records(GATEWAYS)) | {self.instance_id}

    async def is_alive(self, instance_id: str) -> bool:
        """Whether that gateway beat within `liveness_s`: as of the last round, or read now for one this round has not
        seen (a gateway that started since)."""
        return self.seen_alive(instance_id) or instance_id in await self.members()

    async def _beat(self) -> None:
        await self.state.put(
            GATEWAYS, self.instance_id, {"at": self.clock(), "pid": os.getpid()}, ttl_s=self.settings.liveness_s
        )
        self._alive = await self.members()
        self.metrics.gateways.set(len(self._alive))

    async def round(self) -> None:
        """One round of every step; a failing step is logged and counted, the others still run."""
        for name, step in self._steps:
            await self._run(name, step)

    async def _run(self, name: str, step: SyncStep) -> None:
        try:
            await step()
        except Exception:
            self.metrics.failures.labels(name).inc()
            log.warning("fleet sync step %s failed; retried next round", name, exc_info=True)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[FleetSync]:
        """A first round before the gateway serves, then one every `sync_s`; the heartbeat is withdrawn at the end."""
        await self.round()

        async def loop() -> None:
            while True:
                await asyncio.sleep(self.settings.sync_s)
                await self.round()

        task = asyncio.create_task(loop(), name="fleet-sync")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            with contextlib.suppress(Exception):  # a clean stop says so at once; a killed one ages out
                await self.state.delete(GATEWAYS, self.instance_id)

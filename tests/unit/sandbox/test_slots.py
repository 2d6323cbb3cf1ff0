"""How many sandboxes run at once (functions/sandbox/slots.py): a tenant's places in the shared control state (two
gateway replicas count one number), a machine's places as lock files shared by every process and freed by the kernel
when a holder is killed, and the 429 `sandbox_busy` once a run has waited its time."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from functions.sandbox.slots import MachineSlots, SandboxBusyError, SandboxSlots
from shared.storage.conversations import StoreUnavailableError
from shared.storage.sqlite.control_state import SQLiteControlState


def _hold_a_place(directory: str, ready: multiprocessing.synchronize.Event) -> None:  # type: ignore[name-defined]
    fd = MachineSlots(Path(directory), 1).try_acquire()
    assert fd is not None
    ready.set()
    time.sleep(60)


def test_a_machine_place_is_shared_across_processes_and_freed_when_its_holder_is_killed(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    holder = context.Process(target=_hold_a_place, args=(str(tmp_path), ready))
    holder.start()
    try:
        assert ready.wait(30)
        slots = MachineSlots(tmp_path, 1)
        assert slots.try_acquire() is None
        os.kill(holder.pid or 0, signal.SIGKILL)  # no clean-up runs: the kernel drops the lock with the process
        holder.join(10)
        fd = slots.try_acquire()
        assert fd is not None
        assert MachineSlots(tmp_path, 1).try_acquire() is None  # held again, now by us
        os.close(fd)
    finally:
        holder.kill()


def test_a_tenants_places_are_counted_across_replicas_and_a_run_past_them_is_a_429(tmp_path: Path) -> None:
    async def go() -> None:
        replicas = [SQLiteControlState(tmp_path / "control.db") for _ in range(2)]
        first, second = (
            SandboxSlots(MachineSlots(tmp_path / f"machine-{n}", 4), state, per_tenant=1, queue_s=0.2, lease_s=60)
            for n, state in enumerate(replicas)
        )
        async with first.held("ten_a"):
            started = time.monotonic()
            with pytest.raises(SandboxBusyError) as busy:
                async with second.held("ten_a"):
                    pass
            assert time.monotonic() - started >= 0.2  # it waited its time first
            async with second.held("ten_b"):  # another tenant's places are its own
                pass
        async with second.held("ten_a"):  # given back on leaving
            pass
        error = busy.value
        assert (error.status_code, error.code) == (429, "sandbox_busy") and error.headers["retry-after"]
        for state in replicas:
            await state.aclose()

    asyncio.run(go())


def test_a_full_machine_is_a_429_and_a_place_freed_while_waiting_is_taken(tmp_path: Path) -> None:
    async def go() -> None:
        slots = SandboxSlots(MachineSlots(tmp_path, 1), None, per_tenant=8, queue_s=1.0, lease_s=60)
        waiting = None
        async with slots.held("ten_a"):
            with pytest.raises(SandboxBusyError, match="machine"):
                async with SandboxSlots(MachineSlots(tmp_path, 1), None, per_tenant=8, queue_s=0.1, lease_s=60).held(
                    "ten_b"
                ):
                    pass
            waiting = asyncio.create_task(_enter(slots, "ten_c"))
            await asyncio.sleep(0.2)
            assert not waiting.done()
        await asyncio.wait_for(waiting, 2)  # the place freed while it waited

    asyncio.run(go())


async def _enter(slots: SandboxSlots, tenant: str) -> None:
    async with slots.held(tenant):
        pass


class DownState:
    async def acquire_lease(self, scope: str, holder: str, limit: int, ttl_s: float) -> bool:
        raise StoreUnavailableError("down")

    async def release_lease(self, scope: str, holder: str) -> None:
        raise StoreUnavailableError("down")


def test_a_control_state_that_cannot_answer_does_not_stop_runs(tmp_path: Path) -> None:
    slots = SandboxSlots(MachineSlots(tmp_path, 1), DownState(), per_tenant=1, queue_s=0.1, lease_s=60)  # type: ignore[arg-type]

    async def go() -> None:
        async with slots.held("ten_a"):
            pass

    asyncio.run(go())

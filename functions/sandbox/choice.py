"""Which runner runs untrusted code, as the operator's settings say (`server_tools.sandbox.runner`), and the places
that bound how many run at once."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from functions.sandbox.bubblewrap import BubblewrapRunner, FileView
from functions.sandbox.modal_sandboxes import CreateRemoteSandbox, ModalSandboxRunner
from functions.sandbox.protocol import SandboxRunner
from functions.sandbox.slots import MachineSlots, SandboxSlots
from shared.server_tool_settings import SandboxSettings
from shared.storage.control_state import ControlState

LEASE_MARGIN_S = 60.0  # a tenant's place outlives its run by this much when the gateway dies holding it


def sandbox_runner(
    settings: SandboxSettings,
    *,
    view: FileView = FileView.MINIMAL,
    hidden: Sequence[Path] = (),
    create_modal: CreateRemoteSandbox | None = None,
) -> SandboxRunner:
    """The configured runner: bubblewrap here (`view`, `hidden`), or a Modal Sandbox per run (`create_modal`, given by
    the Modal app; without it that runner is unavailable)."""
    if uses_modal(settings, create_modal):
        return ModalSandboxRunner(create_modal, cpu=settings.modal_cpu)
    return BubblewrapRunner(view, hidden)


def uses_modal(settings: SandboxSettings, create_modal: CreateRemoteSandbox | None) -> bool:
    return settings.runner == "modal" or (settings.runner == "auto" and create_modal is not None)


def sandbox_slots(
    settings: SandboxSettings,
    state: ControlState | None,
    longest_run_s: float,
    create_modal: CreateRemoteSandbox | None = None,
) -> SandboxSlots:
    """The tenant's places (in `state`, shared by the replicas) and, for bubblewrap, this machine's."""
    machine = None
    if not uses_modal(settings, create_modal) or settings.per_machine is not None:
        directory = settings.slots_dir or Path(tempfile.gettempdir()) / "fleetchat-sandbox-slots"
        machine = MachineSlots(directory, settings.per_machine or max(2, os.cpu_count() or 1))
    return SandboxSlots(
        machine,
        state,
        per_tenant=settings.per_tenant,
        queue_s=settings.queue_s,
        lease_s=longest_run_s + LEASE_MARGIN_S,
    )

"""Operator settings of the gateway's server-side tools (docs/server-tools.md): timeouts, sandbox limits and runner,
per-tenant quotas and concurrency, circuit breakers and the orchestrator's round bound. `Settings.server_tools` holds
one; set it as JSON in `FLEETCHAT_SERVER_TOOLS` or in the operator file's `server_tools` section."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field


class ToolQuota(BaseModel):
    runs: int = Field(ge=0)  # runs per tenant per window (0: the tool is off for everyone)
    # At most an hour: the shared limits store drops counter windows an hour after they close
    # (shared/storage/limits.py COUNTER_RETENTION_S).
    window_s: int = Field(default=60, ge=1, le=3600)


class SandboxSettings(BaseModel):
    """Where untrusted code runs (docs/sandbox.md) and how many runs at once."""

    # bubblewrap: on the gateway's machine; modal: a Modal Sandbox per run (gpu_workers/modal_app.py gives the deployed
    # gateway and eval job their sandboxes); auto: modal where the Modal app gave them (deployed), else bubblewrap.
    runner: Literal["auto", "bubblewrap", "modal"] = "auto"
    per_tenant: int = Field(default=2, ge=1, le=256)  # runs at once per tenant, across every gateway replica
    # Runs at once on one machine, across every process on it (None: its CPU count, at least 2). Local only: Modal
    # Sandboxes do not run on the gateway's machine.
    per_machine: int | None = Field(default=None, ge=1, le=1024)
    queue_s: float = Field(default=5.0, ge=0, le=60)  # how long a run waits for a place before its 429
    slots_dir: Path | None = None  # the per-machine places' lock files (None: <temp dir>/fleetchat-sandbox-slots)
    modal_cpu: float = Field(default=1.0, gt=0, le=16)  # a Modal Sandbox's CPU cores


class ServerToolSettings(BaseModel):
    # Rounds of server tool calls per request; then one last call without the server tools must answer.
    max_rounds: int = Field(default=4, ge=1, le=16)
    python_timeout_s: float = Field(default=5.0, gt=0, le=60)
    python_memory_mb: int = Field(default=512, ge=64, le=8192)  # address space per process
    python_sandbox_memory_mb: int = Field(default=1024, ge=64, le=16384)  # the whole sandbox, every process together
    python_max_processes: int = Field(default=32, ge=2, le=4096)  # processes and threads at once in one sandbox
    python_scratch_mb: int = Field(default=32, ge=1, le=1024)
    python_output_bytes: int = Field(default=16 << 10, ge=256, le=1 << 20)
    # Files a run may offer for download (written to /mnt/data/out): how many, how large each.
    python_out_files: int = Field(default=8, ge=0, le=64)
    python_out_file_mb: int = Field(default=8, ge=1, le=64)
    calculator_timeout_s: float = Field(default=1.0, gt=0, le=10)
    sandbox: SandboxSettings = SandboxSettings()
    quotas: dict[str, ToolQuota] = {
        "python": ToolQuota(runs=30, window_s=60),
        "calculator": ToolQuota(runs=300, window_s=60),
    }
    # A tool's breaker opens after this many consecutive failures (timeouts, a sandbox that cannot start) and lets
    # one probe run through after the cool-down.
    breaker_failure_threshold: int = Field(default=5, ge=1, le=100)
    breaker_cooldown_s: float = Field(default=30.0, gt=0, le=3600)
    # Characters of a run's input and output kept in its audit record, where the tenant's policy allows content.
    audit_content_chars: int = Field(default=2000, ge=0, le=16_000)

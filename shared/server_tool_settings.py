"""Operator settings of the gateway's server-side tools (docs/server-tools.md): timeouts, sandbox limits, per-tenant
quotas, circuit breakers and the orchestrator's round bound. `Settings.server_tools` holds one; set it as JSON in
`FLEETCHAT_SERVER_TOOLS`."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ToolQuota(BaseModel):
    runs: int = Field(ge=0)  # runs per tenant per window (0: the tool is off for everyone)
    # At most an hour: the shared limits store drops counter windows an hour after they close
    # (shared/storage/limits.py COUNTER_RETENTION_S).
    window_s: int = Field(default=60, ge=1, le=3600)


class ServerToolSettings(BaseModel):
    # Rounds of server tool calls per request; then one last call without the server tools must answer.
    max_rounds: int = Field(default=4, ge=1, le=16)
    python_timeout_s: float = Field(default=5.0, gt=0, le=60)
    python_memory_mb: int = Field(default=512, ge=64, le=8192)
    python_scratch_mb: int = Field(default=32, ge=1, le=1024)
    python_output_bytes: int = Field(default=16 << 10, ge=256, le=1 << 20)
    calculator_timeout_s: float = Field(default=1.0, gt=0, le=10)
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

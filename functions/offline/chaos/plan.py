"""What a chaos run does: the fleet's size, the load, and the faults with their times."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, Field


class FaultKind(StrEnum):
    GATEWAY = "gateway kill -9"
    WORKER = "worker kill -9"
    CONTROL_STATE = "control state paused"  # SIGSTOP of redis-server, SIGCONT after hold_s
    DATABASE = "database locked"  # an exclusive transaction on the accounts and ledger SQLite file for hold_s


class Fault(BaseModel):
    kind: FaultKind
    at_s: float = Field(ge=0)  # seconds after the load started
    target: str  # a process of the fleet by its up.json name (gateway-0, mini-1); "redis"; the SQLite file's name
    hold_s: float = Field(default=0.0, ge=0)  # pauses and locks: how long the store stays unavailable


def default_faults(model: str, hold_s: float = 3.0) -> list[Fault]:
    """One of each, spaced so that each meets streams in flight and the fleet has recovered from the one before."""
    return [
        Fault(kind=FaultKind.GATEWAY, at_s=20, target="gateway-0"),
        Fault(kind=FaultKind.WORKER, at_s=50, target=f"{model}-0"),
        Fault(kind=FaultKind.CONTROL_STATE, at_s=80, target="redis", hold_s=hold_s),
        Fault(kind=FaultKind.DATABASE, at_s=100, target="fleetchat.db", hold_s=hold_s),
    ]


class ChaosConfig(BaseModel):
    out_dir: Path
    aiperf: str | None = None  # the aiperf executable; None: $FLEETCHAT_AIPERF, else `aiperf` on PATH
    model: str = "mini"
    gateways: int = Field(default=2, ge=2)
    replicas: int = Field(default=2, ge=2)
    concurrency: int = Field(default=8, ge=1)
    requests: int = Field(default=32, ge=1)
    max_tokens: int = Field(default=64, ge=1)
    faults: list[Fault] | None = None  # None: default_faults(model)
    load_timeout_s: float = Field(default=1800.0, gt=0)

    def fault_plan(self) -> list[Fault]:
        return sorted(self.faults if self.faults is not None else default_faults(self.model), key=lambda f: f.at_s)

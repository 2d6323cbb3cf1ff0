"""What tests read off a running stack: the `openai` SDK pointed at its gateway, and a tenant's ledger rows in its
data dir's SQLite file (waiting a moment for entries a response settles as it ends)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Protocol

import openai


class RunningStack(Protocol):
    """A gateway on loopback and the data dir it keeps its SQLite files in (tests/conftest.Stack, for one)."""

    @property
    def gateway_url(self) -> str: ...

    @property
    def data_dir(self) -> Path: ...


def client(stack: RunningStack, key: str, *, timeout: float = 120) -> openai.OpenAI:
    """The SDK as a client configures it, without its retries (a test sees every status)."""
    return openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=key, max_retries=0, timeout=timeout)


def ledger(stack: RunningStack, tenant_id: str) -> list[sqlite3.Row]:
    db = sqlite3.connect(stack.data_dir / "fleetchat.db")
    db.row_factory = sqlite3.Row
    try:
        return db.execute("SELECT * FROM ledger WHERE tenant_id = ? ORDER BY created_at", (tenant_id,)).fetchall()
    finally:
        db.close()


def settled(stack: RunningStack, tenant_id: str, count: int, timeout_s: float = 10) -> list[sqlite3.Row]:
    """The tenant's ledger rows once there are `count` of them (or what there is after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while len(rows := ledger(stack, tenant_id)) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return rows

"""Gateway processes the benchmark's own phases start: one `fleetchat gateway` subprocess on a free loopback port over a
phase's data dir and workers, waited for until it serves, stopped at the end."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from shared.fleet.tables import policy_for
from shared.fleet.tiers import LimitOverrides, Tier

GATEWAY_START_TIMEOUT_S = 60.0
GATEWAY_STOP_TIMEOUT_S = 20.0
UNLIMITED = 1_000_000_000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class BenchGateway:
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=GATEWAY_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=GATEWAY_STOP_TIMEOUT_S)


def spawn_gateway(
    data_dir: Path,
    model: str,
    worker_urls: list[str],
    *,
    session_secret: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> BenchGateway:
    """A gateway serving `model` from `worker_urls` over `data_dir` (SQLite stores), without the shadow judge. Replicas
    of one phase pass one `session_secret`, so neither races to create the file."""
    port = free_port()
    env = {
        **os.environ,
        "FLEETCHAT_ENVIRONMENT": "local",
        "FLEETCHAT_HOST": "127.0.0.1",
        "FLEETCHAT_ACCOUNTS_STORE": "sqlite",
        "FLEETCHAT_CONVERSATION_STORE": "sqlite",
        "FLEETCHAT_WORKER_URLS": json.dumps({model: worker_urls}),
        "FLEETCHAT_POOLS": json.dumps([model]),
        "FLEETCHAT_SESSION_SECRET": session_secret or secrets.token_urlsafe(48),
        "FLEETCHAT_SHADOW_JUDGE_SHARE": "0",
        **(extra_env or {}),
    }
    log_path = data_dir.parent / f"gateway-{port}.log"
    command = [
        sys.executable,
        "-m",
        "functions.cli",
        "gateway",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
    ]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    return BenchGateway(f"http://127.0.0.1:{port}", proc, log_path)


async def wait_ready(http: httpx.AsyncClient, gateway: BenchGateway) -> None:
    deadline = time.monotonic() + GATEWAY_START_TIMEOUT_S
    while True:
        if gateway.proc.poll() is not None:
            raise RuntimeError(f"gateway {gateway.url} exited with {gateway.proc.returncode}: {gateway.log_tail()}")
        try:
            if (await http.get(f"{gateway.url}/metrics", timeout=2.0)).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"gateway {gateway.url} not ready in {GATEWAY_START_TIMEOUT_S:.0f} s: {gateway.log_tail()}"
            )
        await asyncio.sleep(0.3)


def tier_for(model: str) -> Tier:
    """The first tier allowed to use `model` (Plus for the packaged pools)."""
    return next(
        (tier for tier in (Tier.PLUS, Tier.ENTERPRISE, Tier.FREE) if model in policy_for(tier).pools), Tier.PLUS
    )


def unlimited_tenant(data_dir: Path, model: str, name: str) -> str:
    """A tenant of the first tier allowed the model, without rate limits, in a phase's SQLite data dir; its API key."""
    from functions.accounts.operations import create_tenant_with_key
    from shared.settings import Settings
    from shared.storage.accounts import TenantChanges
    from shared.storage.factory import open_tenant_store

    big = LimitOverrides(
        key_rpm=UNLIMITED, key_tpm=UNLIMITED, tenant_rpm=UNLIMITED, tenant_tpm=UNLIMITED, message_cap=UNLIMITED
    )
    store = open_tenant_store(Settings(environment="local", data_dir=data_dir, accounts_store="sqlite"))
    try:
        tenant, minted = create_tenant_with_key(store, name, tier_for(model), "bench")
        store.update_tenant(tenant.id, TenantChanges(limits=big))
    finally:
        store.close()
    return minted.key

"""Shared fixtures: one real stack per test session (two SmolLM2 workers + a gateway process) and API keys."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from functions.accounts.operations import create_tenant_with_key, mint_admin_key
from functions.metrics.control import POOL_IN_FLIGHT, QUEUE_DEPTH
from shared.fleet.tiers import Tier
from shared.storage.sqlite.accounts import SQLiteStore
from tests.support.processes import ProcessGroup, free_port, start_gateway, start_worker
from tests.support.prom import sample

# The shadow judge would grade a random 5 % of answers with the flagship's workers, adding worker calls that tests
# counting them exactly do not expect; tests of the shadow judge set their own share. Gateways started by the tests
# inherit this.
os.environ.setdefault("FLEETCHAT_SHADOW_JUDGE_SHARE", "0")


@dataclass
class Stack:
    gateway_url: str
    worker_urls: dict[str, list[str]]
    data_dir: Path

    def new_key(self, tier: Tier, name: str = "test") -> str:
        return self.new_tenant(tier, name)[1]

    def new_tenant(self, tier: Tier, name: str = "test") -> tuple[str, str]:
        """(tenant id, API key) of a new tenant in the stack's store."""
        store = SQLiteStore(self.data_dir / "fleetchat.db")
        try:
            tenant, minted = create_tenant_with_key(store, name, tier, label=name)
            return tenant.id, minted.key
        finally:
            store.close()

    def admin_key(self) -> str:
        store = SQLiteStore(self.data_dir / "fleetchat.db")
        try:
            return mint_admin_key(store, "tests").key
        finally:
            store.close()

    def load(self) -> str:
        """What the shared stack is busy with, for a failure message: each worker's running and waiting requests
        (vLLM's names) and the gateway's places in use and queued requests, over all its pools."""
        parts = []
        for pool, urls in self.worker_urls.items():
            for url in urls:
                running, waiting = (sample(url, f"vllm:num_requests_{what}") for what in ("running", "waiting"))
                parts.append(f"worker {pool}: {running:.0f} running, {waiting:.0f} waiting")
        in_flight, queued = (sample(self.gateway_url, name) for name in (POOL_IN_FLIGHT, QUEUE_DEPTH))
        return "; ".join([*parts, f"gateway: {in_flight:.0f} places in use, {queued:.0f} queued"])


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("stack")
    group = ProcessGroup(root / "logs")
    try:
        starting = {pool: start_worker(group, pool, free_port()) for pool in ("mini", "flagship")}
        worker_urls = {pool: [w.wait()] for pool, w in starting.items()}
        gateway = start_gateway(group, root / "data", worker_urls, free_port())
        yield Stack(gateway, worker_urls, root / "data")
    finally:
        group.stop()


@pytest.fixture(scope="session")
def plus_key(stack: Stack) -> str:
    return stack.new_key(Tier.PLUS, "plus-tenant")


@pytest.fixture(scope="session")
def free_key(stack: Stack) -> str:
    return stack.new_key(Tier.FREE, "free-tenant")


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    """The same tokenizer the worker uses, to check usage counts independently."""
    from transformers import AutoTokenizer

    from gpu_workers.model_loader import packaged_gguf_source
    from shared.fleet.pools import LocalModel

    source = packaged_gguf_source(LocalModel())
    return AutoTokenizer.from_pretrained(source.path_or_repo, gguf_file=source.gguf_file)

"""A gateway (real uvicorn on loopback) in front of given worker URLs, with its own SQLite data dir and tenants."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from functions.app import create_app
from shared.api_keys import hash_api_key, new_api_key
from shared.fleet.tiers import Tier
from shared.settings import Settings
from shared.storage.conversations import ConversationStore
from shared.storage.sqlite.accounts import SQLiteStore
from tests.support.servers import serve


@dataclass
class Gateway:
    url: str
    key: str
    other_key: str  # a second tenant, for isolation checks
    data_dir: Path

    def headers(self, key: str | None = None) -> dict[str, str]:
        return {"authorization": f"Bearer {key or self.key}"}


GatewayFactory = Callable[..., Gateway]


@pytest.fixture
def gateway_for(tmp_path: Path) -> Iterator[GatewayFactory]:
    """build(worker_urls, conversations=None, **settings) -> Gateway; `conversations` replaces the SQLite conversation
    store; `settings` are further Settings fields (e.g. the safety guard)."""
    running = []

    def build(
        worker_urls: dict[str, list[str]], conversations: ConversationStore | None = None, **overrides: Any
    ) -> Gateway:
        store = SQLiteStore(tmp_path / "fleetchat.db")
        keys = []
        for name in ("owner", "other"):
            tenant = store.create_tenant(name, Tier.PLUS)
            keys.append(new_api_key())
            store.add_api_key(tenant.id, hash_api_key(keys[-1]), name)
        settings = Settings(data_dir=tmp_path, worker_urls=worker_urls, pools=list(worker_urls), **overrides)
        ctx = serve(create_app(settings, store=store, conversations=conversations))
        running.append(ctx)
        return Gateway(ctx.__enter__(), keys[0], keys[1], tmp_path)

    yield build
    for ctx in reversed(running):
        ctx.__exit__(None, None, None)

"""Another fleetchat gateway as a remote guard: the embedded guard behind its own `/v1/moderations`, on its own data
dir, with an API key of a tenant on the tier asked for (its chat worker is a stand-in it never calls)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from functions.app import create_app
from shared.api_keys import hash_api_key, new_api_key
from shared.fleet.tiers import Tier
from shared.settings import Settings
from shared.storage.sqlite.accounts import SQLiteStore
from tests.support.servers import serve
from tests.support.stand_ins.stand_in import stand_in_worker


@contextmanager
def fleetchat_guard(data_dir: Path, tier: Tier = Tier.PLUS) -> Iterator[tuple[str, str]]:
    """(base URL, API key) of a running gateway whose database is `data_dir / "fleetchat.db"`."""
    store = SQLiteStore(data_dir / "fleetchat.db")
    tenant = store.create_tenant("downstream", tier)
    key = new_api_key()
    store.add_api_key(tenant.id, hash_api_key(key), "downstream")
    with serve(stand_in_worker("unused")) as worker:
        settings = Settings(data_dir=data_dir, worker_urls={"mini": [worker]}, pools=["mini"])
        with serve(create_app(settings, store=store)) as url:
            yield url, key

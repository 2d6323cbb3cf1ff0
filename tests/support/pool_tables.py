"""A chat pool's deployed model changed for one test (a model that reasons, one that sees): the fleet tables in force
are replaced while the test runs and put back after."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shared.fleet.tables import install_tables, tables


@contextmanager
def deployed_model_changed(pool: str, **changes: Any) -> Iterator[None]:
    live = tables()
    model = live.pools[pool]
    changed = model.model_copy(update={"deployed": model.deployed.model_copy(update=changes)})
    install_tables(live.replaced(pools={**live.pools, pool: changed}))
    try:
        yield
    finally:
        install_tables(live)

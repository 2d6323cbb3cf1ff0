"""The built-in tables as a config document, a file's document completed from them, and installing a document into
the live tables (shared/fleet/pools.py, shared/fleet/tiers.py, shared/fleet/embedding_pools.py,
shared/fleet/external_pools.py).

The live tables are module-level dicts every caller reads at call time (`limits_for`, `get_pool`, `POOLS.get`), so
they are updated in place: a swap is seen everywhere at once, by modules that imported the dict itself too.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from shared.fleet.embedding_pools import EMBEDDING_POOLS
from shared.fleet.external_pools import EXTERNAL_POOLS
from shared.fleet.pools import GUARD_POOLS, POOLS
from shared.fleet.tiers import TIER_TABLE
from shared.operator_config.document import GuardConfig, JudgeConfig, OperatorConfig
from shared.server_tool_settings import ServerToolSettings

# Taken once, before any file is installed: what a section left out of a file means.
_BUILTIN = OperatorConfig(
    pools=dict(POOLS),
    guard_pools=dict(GUARD_POOLS),
    embedding_pools=dict(EMBEDDING_POOLS),
    external_pools=dict(EXTERNAL_POOLS),
    tiers=dict(TIER_TABLE),
    guard=GuardConfig(),
    judge=JudgeConfig(),
    capacity={},
    server_tools=ServerToolSettings(),
)


def builtin_config() -> OperatorConfig:
    """Today's Python tables and settings defaults, as a document (what the shipped config/fleetchat.yaml holds)."""
    return _BUILTIN.model_copy(deep=True)


def resolve(document: OperatorConfig) -> OperatorConfig:
    """Every section filled in: the file's where it has one, else the built-in; `tiers` per tier."""
    builtin = builtin_config()
    filled: dict[str, Any] = {
        name: getattr(document, name) if getattr(document, name) is not None else getattr(builtin, name)
        for name in OperatorConfig.model_fields
    }
    filled["tiers"] = {**(builtin.tiers or {}), **(document.tiers or {})}
    return OperatorConfig.model_construct(**filled)


def install(config: OperatorConfig) -> None:
    """Make `config` (complete: from `resolve`) the live tables."""
    _replace(POOLS, config.pools or {})
    _replace(GUARD_POOLS, config.guard_pools or {})
    _replace(EMBEDDING_POOLS, config.embedding_pools or {})
    _replace(EXTERNAL_POOLS, config.external_pools or {})
    _replace(TIER_TABLE, config.tiers or {})


def install_limits(config: OperatorConfig) -> list[str]:
    """A hot reload: the tiers (limits, SLOs, retention, safety policy, cache TTL) and the prices of pools already
    running. Returns the sections that changed but need a restart (the gateway routes to the pools it started with)."""
    _replace(TIER_TABLE, config.tiers or {})
    for name, pool in (config.pools or {}).items():
        if name in POOLS and POOLS[name].model_copy(update={"price": pool.price}) == pool:
            POOLS[name] = pool  # only its price changed: safe to swap under running requests
    live = current_config()
    sections = ("pools", "guard_pools", "embedding_pools", "external_pools")
    return [name for name in sections if getattr(live, name) != getattr(config, name)]


def current_config() -> OperatorConfig:
    """The live tables as a document (settings-level sections as built in)."""
    return builtin_config().model_copy(
        update={
            "pools": dict(POOLS),
            "guard_pools": dict(GUARD_POOLS),
            "embedding_pools": dict(EMBEDDING_POOLS),
            "external_pools": dict(EXTERNAL_POOLS),
            "tiers": dict(TIER_TABLE),
        }
    )


def _replace(table: MutableMapping[Any, Any], new: dict[Any, Any]) -> None:
    """Update in place: set the new entries first, then drop the removed ones (never an empty table in between)."""
    table.update(new)
    for name in [name for name in table if name not in new]:
        del table[name]

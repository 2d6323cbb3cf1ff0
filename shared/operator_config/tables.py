"""The built-in tables as a config document, a file's document completed from them, and installing a document as the
tables in force (shared/fleet/tables.py): one new snapshot, swapped in whole, at start and on a hot reload."""

from __future__ import annotations

from typing import Any

from shared.fleet.tables import BUILTIN_TABLES, FleetTables, install_tables, tables
from shared.operator_config.document import GuardConfig, JudgeConfig, OperatorConfig
from shared.server_tool_settings import ServerToolSettings

# Taken once, before any file is installed: what a section left out of a file means.
_BUILTIN = OperatorConfig(
    pools=dict(BUILTIN_TABLES.pools),
    guard_pools=dict(BUILTIN_TABLES.guard_pools),
    embedding_pools=dict(BUILTIN_TABLES.embedding_pools),
    rerank_pools=dict(BUILTIN_TABLES.rerank_pools),
    external_pools=dict(BUILTIN_TABLES.external_pools),
    tiers=dict(BUILTIN_TABLES.tiers),
    guard=GuardConfig(),
    judge=JudgeConfig(),
    capacity={},
    server_tools=ServerToolSettings(),
)


def builtin_config() -> OperatorConfig:
    """The built-in tables (shared/fleet/builtin.yaml) and the settings sections' defaults, as a document."""
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
    """Make `config` (complete: from `resolve`) the tables in force."""
    install_tables(
        FleetTables.of(
            pools=config.pools or {},
            guard_pools=config.guard_pools or {},
            embedding_pools=config.embedding_pools or {},
            rerank_pools=config.rerank_pools or {},
            external_pools=config.external_pools or {},
            tiers=config.tiers or {},
        )
    )


def install_limits(config: OperatorConfig) -> list[str]:
    """A hot reload: the tiers (limits, SLOs, retention, safety policy, cache TTL) and the prices of pools already
    running, swapped in as one new snapshot. Returns the sections that changed but need a restart (the gateway routes
    to the pools it started with)."""
    live = tables()
    pools = dict(live.pools)
    for name, pool in (config.pools or {}).items():
        prices = {"price": pool.price, "list_price": pool.list_price}
        if name in pools and pools[name].model_copy(update=prices) == pool:
            pools[name] = pool  # only its prices changed: safe to swap under running requests
    install_tables(live.replaced(pools=pools, tiers=config.tiers or {}))
    current = current_config()
    sections = ("pools", "guard_pools", "embedding_pools", "rerank_pools", "external_pools")
    return [name for name in sections if getattr(current, name) != getattr(config, name)]


def current_config() -> OperatorConfig:
    """The tables in force as a document (settings-level sections as built in)."""
    live = tables()
    return builtin_config().model_copy(
        update={
            "pools": dict(live.pools),
            "guard_pools": dict(live.guard_pools),
            "embedding_pools": dict(live.embedding_pools),
            "rerank_pools": dict(live.rerank_pools),
            "external_pools": dict(live.external_pools),
            "tiers": dict(live.tiers),
        }
    )

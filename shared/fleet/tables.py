"""The fleet's tables in force as one immutable snapshot: chat, guard, embedding, re-rank and external pools, tiers.

The built-in tables are stated once, in builtin.yaml beside this module, and loaded at import (BUILTIN_TABLES). The
operator config file's resolved document becomes a new snapshot (shared/operator_config/tables.py), installed whole at
start and swapped whole on a hot reload: a reader sees the old snapshot or the new one, never a mix, and nothing edits
a table in place (the mappings are read-only views)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from pydantic import TypeAdapter

from shared.fleet.embedding_pools import EMBEDDING_LEDGER_PREFIX, EmbeddingPool
from shared.fleet.external_pools import ExternalPool
from shared.fleet.pools import ModelPool
from shared.fleet.rerank_pools import RERANK_LEDGER_PREFIX, RerankPool
from shared.fleet.tiers import (
    LimitOverrides,
    SafetyOverrides,
    SafetyPolicy,
    Tier,
    TierLimits,
    TierPolicy,
)
from shared.wire.schemas import ModelPricing

BUILTIN_FILE = Path(__file__).with_name("builtin.yaml")


@dataclass(frozen=True)
class FleetTables:
    """One consistent set of tables (read-only mappings)."""

    pools: Mapping[str, ModelPool]
    guard_pools: Mapping[str, ModelPool]
    embedding_pools: Mapping[str, EmbeddingPool]
    external_pools: Mapping[str, ExternalPool]
    tiers: Mapping[Tier, TierPolicy]
    rerank_pools: Mapping[str, RerankPool]

    @classmethod
    def of(
        cls,
        *,
        pools: Mapping[str, ModelPool],
        guard_pools: Mapping[str, ModelPool],
        embedding_pools: Mapping[str, EmbeddingPool],
        external_pools: Mapping[str, ExternalPool],
        tiers: Mapping[Tier, TierPolicy],
        rerank_pools: Mapping[str, RerankPool] | None = None,
    ) -> FleetTables:
        """A snapshot of copies of these tables: later changes to the arguments do not reach it."""
        return cls(
            MappingProxyType(dict(pools)),
            MappingProxyType(dict(guard_pools)),
            MappingProxyType(dict(embedding_pools)),
            MappingProxyType(dict(external_pools)),
            MappingProxyType(dict(tiers)),
            MappingProxyType(dict(rerank_pools or {})),
        )

    def replaced(self, **tables: Mapping[Any, Any]) -> FleetTables:
        """This snapshot with some tables replaced (a new snapshot; this one is unchanged)."""
        current = {
            "pools": self.pools,
            "guard_pools": self.guard_pools,
            "embedding_pools": self.embedding_pools,
            "external_pools": self.external_pools,
            "tiers": self.tiers,
            "rerank_pools": self.rerank_pools,
        }
        return FleetTables.of(**{**current, **tables})


# The field each table's key fills in, so an entry does not repeat its name (builtin.yaml's and the operator file's
# shape).
KEY_FIELDS = {
    "pools": "name",
    "guard_pools": "name",
    "embedding_pools": "name",
    "rerank_pools": "name",
    "external_pools": "name",
    "tiers": "tier",
}
_TABLE_TYPES: dict[str, TypeAdapter[Any]] = {
    "pools": TypeAdapter(dict[str, ModelPool]),
    "guard_pools": TypeAdapter(dict[str, ModelPool]),
    "embedding_pools": TypeAdapter(dict[str, EmbeddingPool]),
    "rerank_pools": TypeAdapter(dict[str, RerankPool]),
    "external_pools": TypeAdapter(dict[str, ExternalPool]),
    "tiers": TypeAdapter(dict[Tier, TierPolicy]),
}


def named(section: str, entries: Mapping[str, Any]) -> dict[str, Any]:
    """A table's entries with the key filled into each entry's name field (`pools.mini` -> `name: mini`)."""
    field = KEY_FIELDS[section]
    return {key: {field: key, **entry} if isinstance(entry, dict) else entry for key, entry in entries.items()}


def load_builtin(path: Path = BUILTIN_FILE) -> FleetTables:
    """The built-in tables from `path` (every table section present, each tier naming only defined pools)."""
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    loaded = {
        section: adapter.validate_python(named(section, document.get(section) or {}))
        for section, adapter in _TABLE_TYPES.items()
    }
    routable = set(loaded["pools"]) | set(loaded["external_pools"])
    unknown = sorted({pool for policy in loaded["tiers"].values() for pool in policy.pools} - routable)
    if unknown or set(loaded["tiers"]) != set(Tier):
        raise ValueError(f"{path}: the tiers must be {[t.value for t in Tier]} and name defined pools (not {unknown})")
    return FleetTables.of(**loaded)


BUILTIN_TABLES = load_builtin()

_in_force: FleetTables = BUILTIN_TABLES


def tables() -> FleetTables:
    """The snapshot in force: read it at the time of use (a hot reload may have swapped it since)."""
    return _in_force


def install_tables(snapshot: FleetTables) -> None:
    """Make `snapshot` the tables in force, in one assignment."""
    global _in_force
    _in_force = snapshot


def get_pool(name: str) -> ModelPool | None:
    return _in_force.pools.get(name)


def get_embedding_pool(name: str) -> EmbeddingPool | None:
    return _in_force.embedding_pools.get(name)


def get_rerank_pool(name: str) -> RerankPool | None:
    return _in_force.rerank_pools.get(name)


def list_price(model: str) -> ModelPricing | None:
    """The customer's price of a model (a chat, hosted, embedding or re-rank pool; the ledger names an embedding
    model `embedding:<pool>` and a re-rank model `rerank:<pool>`), where the operator set one."""
    embedding = model.removeprefix(EMBEDDING_LEDGER_PREFIX)
    rerank = model.removeprefix(RERANK_LEDGER_PREFIX)
    pool = (
        _in_force.pools.get(model) or _in_force.external_pools.get(model)
        or _in_force.embedding_pools.get(embedding) or _in_force.rerank_pools.get(rerank)
    )  # fmt: skip
    return None if pool is None else pool.list_price


def policy_for(tier: Tier) -> TierPolicy:
    return _in_force.tiers[tier]


def limits_for(tier: Tier, overrides: LimitOverrides | None = None) -> TierLimits:
    """The tier's limits with a tenant's overrides applied."""
    base = _in_force.tiers[tier].limits
    if overrides is None:
        return base
    return base.model_copy(update=overrides.model_dump(exclude_none=True))


def safety_for(tier: Tier, overrides: SafetyOverrides | None = None) -> SafetyPolicy:
    """The tier's safety policy; an enterprise tenant's overrides applied (other tiers cannot change it)."""
    base = _in_force.tiers[tier].safety
    if overrides is None or tier is not Tier.ENTERPRISE:
        return base
    return base.model_copy(update=overrides.model_dump(exclude_none=True))


def upstream_request(
    pool: str, replica: str, path: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[str, dict[str, Any], dict[str, str]]:
    """What the worker client sends for `pool`: to the replica unchanged, or rewritten for an external pool."""
    external = _in_force.external_pools.get(pool)
    if external is None:
        return f"{replica}{path}", body, headers
    return external.upstream_request(path, body, headers)


def external_worker_urls() -> dict[str, list[str]]:
    """External pools as the router's "replicas": one each, its base URL (breakers and retries apply as to ours)."""
    return {name: [pool.external.base_url] for name, pool in _in_force.external_pools.items()}

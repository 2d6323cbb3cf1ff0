"""The operator config document: its sections as pydantic models (the same models the Python tables use), and the
checks between sections (a tier naming an unknown pool, one name used by two pools).

Every section is optional. `pools`, `guard_pools`, `embedding_pools`, `rerank_pools` and `external_pools` replace their
built-in table
when present (the file's set is the set); `tiers` replaces the tiers it names (a tier left out keeps its built-in
policy); `guard`, `judge`, `capacity` and `server_tools` fill the matching FLEETCHAT_* settings that the environment
does not set.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, model_validator

from shared.fleet.embedding_pools import EmbeddingPool
from shared.fleet.external_pools import ExternalPool
from shared.fleet.pools import ModelPool
from shared.fleet.rerank_pools import RerankPool
from shared.fleet.tables import KEY_FIELDS, named
from shared.fleet.tiers import Tier, TierPolicy
from shared.operator_config.issues import Loc
from shared.server_tool_settings import ServerToolSettings
from shared.settings import GuardOptions, JudgeOptions, TracingOptions

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class GuardConfig(GuardOptions):
    """The safety guard (docs/safety-guard.md): the `guard` settings section's options, and the variable that holds
    its key (never the key itself)."""

    api_key_env: str | None = Field(default=None, pattern=ENV_NAME)


class JudgeConfig(JudgeOptions):
    """The LLM judge: a chat pool or an external pool (FLEETCHAT_JUDGE_URL, when set, still wins)."""


Capacity = dict[str, Annotated[int, Field(ge=1)]]


class OperatorConfig(BaseModel):
    pools: dict[str, ModelPool] | None = None
    guard_pools: dict[str, ModelPool] | None = None
    embedding_pools: dict[str, EmbeddingPool] | None = None
    rerank_pools: dict[str, RerankPool] | None = None
    external_pools: dict[str, ExternalPool] | None = None
    tiers: dict[Tier, TierPolicy] | None = None
    guard: GuardConfig | None = None
    judge: JudgeConfig | None = None
    capacity: Capacity | None = None  # places per pool at this gateway (FLEETCHAT_POOL_CAPACITY)
    server_tools: ServerToolSettings | None = None
    tracing: TracingOptions | None = None  # OTLP export of the gateway's traces (FLEETCHAT_TRACING_*)

    @model_validator(mode="before")
    @classmethod
    def _names_from_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for section in KEY_FIELDS:
            entries = data.get(section)
            if isinstance(entries, dict):
                data[section] = named(section, entries)
        return data

    def routable(self) -> set[str]:
        """Names a tier, the judge or a capacity may use: chat pools and external pools."""
        return set(self.pools or {}) | set(self.external_pools or {})

    def reference_problems(self) -> list[tuple[Loc, str]]:
        """Problems between sections, on a complete document (every section filled in)."""
        problems: list[tuple[Loc, str]] = []
        owners: dict[str, str] = {}
        for section in ("pools", "guard_pools", "external_pools", "embedding_pools", "rerank_pools"):
            for key, entry in (getattr(self, section) or {}).items():
                if entry.name != key:
                    problems.append(((section, key, "name"), f"must be the entry's key {key!r}"))
                if key in owners:
                    problems.append(((section, key), f"duplicate pool {key!r}: already defined in {owners[key]}"))
                owners.setdefault(key, section)
        routable = self.routable()
        for tier, policy in (self.tiers or {}).items():
            for index, pool in enumerate(policy.pools):
                if pool not in routable:
                    problems.append((("tiers", tier.value, "pools", index), _unknown(pool, routable)))
            if policy.default_pool not in policy.pools:
                reason = f"{policy.default_pool!r} is not one of this tier's pools {list(policy.pools)}"
                problems.append((("tiers", tier.value, "default_pool"), reason))
        embedding = set(self.embedding_pools or {})
        for key, entry in (self.rerank_pools or {}).items():
            if entry.local.embedding_pool not in embedding:
                problems.append(
                    (("rerank_pools", key, "local", "embedding_pool"), _unknown(entry.local.embedding_pool, embedding))
                )
        if self.judge is not None and self.judge.pool not in routable:
            problems.append((("judge", "pool"), _unknown(self.judge.pool, routable)))
        for pool in self.capacity or {}:
            if pool not in routable:
                problems.append((("capacity", pool), _unknown(pool, routable)))
        return problems


def _unknown(pool: str, known: set[str]) -> str:
    return f"unknown pool {pool!r}; defined: {sorted(known)}"

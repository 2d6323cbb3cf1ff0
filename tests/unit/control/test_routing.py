"""Tier → pool resolution and sticky replica choice by consistent hashing."""

from __future__ import annotations

import pytest

from functions.control.routing import HashRing, PoolRouter, pools_for_tier, resolve_pool
from shared.errors import ModelNotFoundError
from shared.fleet.tables import tables
from shared.fleet.tiers import Tier

REPLICAS = [f"http://127.0.0.1:{8100 + i}" for i in range(4)]


def test_same_session_always_gets_the_same_replica() -> None:
    router = PoolRouter({"mini": REPLICAS})
    first = [router.candidates("mini", f"conv-{i}")[0] for i in range(200)]
    again = [router.candidates("mini", f"conv-{i}")[0] for i in range(200)]
    assert first == again
    assert len(set(first)) == 4, "sessions should spread over every replica"


def test_candidates_list_every_replica_once_owner_first() -> None:
    ring = HashRing(REPLICAS)
    order = list(ring.candidates("conv-42"))
    assert sorted(order) == sorted(REPLICAS)
    assert order[0] == next(ring.candidates("conv-42"))


def test_removing_a_replica_moves_only_its_sessions() -> None:
    before = HashRing(REPLICAS)
    after = HashRing(REPLICAS[:3])
    moved = 0
    for i in range(1000):
        owner = next(before.candidates(f"s{i}"))
        if owner != REPLICAS[3]:
            moved += owner != next(after.candidates(f"s{i}"))
    assert moved == 0


def test_without_session_requests_rotate() -> None:
    router = PoolRouter({"mini": REPLICAS[:2]})
    firsts = {router.candidates("mini", None)[0] for _ in range(4)}
    assert firsts == set(REPLICAS[:2])


def test_tier_table_governs_models() -> None:
    served = ["mini", "flagship"]
    assert pools_for_tier(Tier.FREE, served) == ["mini"]
    assert resolve_pool(Tier.PLUS, "flagship", served) == "flagship"
    with pytest.raises(ModelNotFoundError):
        resolve_pool(Tier.FREE, "flagship", served)
    with pytest.raises(ModelNotFoundError):
        resolve_pool(Tier.ENTERPRISE, "flagship", ["mini"])  # a pool not served here is not offered
    assert all(policy.default_pool in policy.pools for policy in tables().tiers.values())

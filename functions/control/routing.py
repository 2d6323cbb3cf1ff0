"""Model routing: the tier table picks the pool, a consistent-hash ring picks the replica.

Sticky replicas keep a conversation on the worker that holds its KV blocks, so multi-turn chat hits the prefix cache.
Consistent hashing moves only ~1/N of sessions when a replica joins or leaves. A replica whose circuit breaker is
open goes to the end of the candidates (functions/control/replica_breakers.py) without moving any healthy replica's
place.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
from collections.abc import Iterator, Sequence

from functions.control.replica_breakers import ReplicaBreakers
from shared.errors import ModelNotFoundError
from shared.fleet.tables import policy_for
from shared.fleet.tiers import Tier

VIRTUAL_NODES = 64


def _point(value: str) -> int:
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "big")


class HashRing:
    def __init__(self, replicas: Sequence[str], virtual_nodes: int = VIRTUAL_NODES) -> None:
        if not replicas:
            raise ValueError("a ring needs at least one replica")
        self.replicas = list(replicas)
        points = sorted((_point(f"{replica}#{v}"), replica) for replica in replicas for v in range(virtual_nodes))
        self._keys = [p for p, _ in points]
        self._owners = [r for _, r in points]

    def candidates(self, key: str) -> Iterator[str]:
        """Replicas in preference order for `key`: its owner first, then the next distinct ones clockwise."""
        start = bisect.bisect(self._keys, _point(key))
        seen: set[str] = set()
        for i in range(len(self._owners)):
            owner = self._owners[(start + i) % len(self._owners)]
            if owner not in seen:
                seen.add(owner)
                yield owner
            if len(seen) == len(self.replicas):
                return


class PoolRouter:
    """Replica choice per pool: sticky by session id when given, round-robin otherwise; replicas held back by their
    circuit breaker last."""

    def __init__(self, worker_urls: dict[str, list[str]], breakers: ReplicaBreakers | None = None) -> None:
        self._rings = {pool: HashRing(urls) for pool, urls in worker_urls.items() if urls}
        self._round_robin = {pool: itertools.count() for pool in self._rings}
        self.breakers = breakers if breakers is not None else ReplicaBreakers(worker_urls)

    @property
    def pools(self) -> list[str]:
        return list(self._rings)

    def candidates(self, pool: str, session_id: str | None) -> list[str]:
        ring = self._rings[pool]
        if session_id:
            ordered = list(ring.candidates(session_id))
        else:
            start = next(self._round_robin[pool]) % len(ring.replicas)
            ordered = ring.replicas[start:] + ring.replicas[:start]
        return self.breakers.order(pool, ordered)


def pools_for_tier(tier: Tier, served: Sequence[str]) -> list[str]:
    """Pools this tier may use that are actually served here."""
    return [p for p in policy_for(tier).pools if p in served]


def resolve_pool(tier: Tier, requested_model: str, served: Sequence[str]) -> str:
    """The pool serving `requested_model` for this tier, or the OpenAI 404 `model_not_found`."""
    if requested_model in pools_for_tier(tier, served):
        return requested_model
    raise ModelNotFoundError(
        f"The model `{requested_model}` does not exist or you do not have access to it.", param="model"
    )

"""An account's memory on both tenant stores (SQLite; DynamoDB on moto): kept with the tenant, changed atomically
(concurrent changes all land), a refused change writes nothing, the caller's tenant carries it."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from shared.api_keys import hash_api_key, new_api_key
from shared.fleet.tiers import Tier
from shared.storage.accounts import TenantChanges, TenantStore
from shared.storage.memory import Memory, MemoryItem


def add(text: str) -> Callable[[Memory], Memory]:
    return lambda memory: memory.model_copy(update={"items": [*memory.items, MemoryItem.new(text)]})


def test_memory_round_trips_and_is_carried_with_the_tenant(tenant_store: TenantStore) -> None:
    tenant = tenant_store.create_tenant("acme", Tier.PLUS)
    assert tenant.memory is None
    updated = tenant_store.update_memory(tenant.id, add("I live in Porto ✓"))
    assert updated is not None and updated.memory is not None and not updated.memory.enabled
    on = tenant_store.update_memory(tenant.id, lambda m: m.model_copy(update={"enabled": True}))
    assert on is not None and on.memory is not None and on.memory.in_use() == ["I live in Porto ✓"]
    key = new_api_key()
    tenant_store.add_api_key(tenant.id, hash_api_key(key), "k")
    found = tenant_store.find_key_with_tenant(hash_api_key(key))
    assert found is not None and found[1].memory == on.memory  # what a request's caller carries
    assert tenant_store.update_tenant(tenant.id, TenantChanges(instructions="Be brief")).memory == on.memory  # type: ignore[union-attr]
    assert tenant_store.get_tenant(tenant.id) == tenant_store.update_memory(tenant.id, lambda m: m)
    assert tenant_store.update_memory("ten_missing", add("x")) is None


def test_concurrent_changes_all_land(tenant_store: TenantStore) -> None:
    tenant = tenant_store.create_tenant("acme", Tier.PLUS)
    writers = [
        threading.Thread(target=tenant_store.update_memory, args=(tenant.id, add(f"fact {i}"))) for i in range(6)
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    stored = tenant_store.get_tenant(tenant.id)
    assert stored is not None and stored.memory is not None
    assert sorted(item.text for item in stored.memory.items) == [f"fact {i}" for i in range(6)]


def test_a_refused_change_writes_nothing(tenant_store: TenantStore) -> None:
    tenant = tenant_store.create_tenant("acme", Tier.PLUS)
    tenant_store.update_memory(tenant.id, add("kept"))

    def refuse(memory: Memory) -> Memory:
        raise ValueError("full")

    with pytest.raises(ValueError):
        tenant_store.update_memory(tenant.id, refuse)
    stored = tenant_store.get_tenant(tenant.id)
    assert stored is not None and stored.memory is not None and [i.text for i in stored.memory.items] == ["kept"]

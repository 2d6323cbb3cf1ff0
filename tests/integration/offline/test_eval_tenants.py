"""Eval tenants bootstrapped through the admin API of a real gateway: purpose eval, limit overrides, keys kept in a
0600 file and reused, replaced when revoked; without an admin key nothing is created."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from functions.accounts.operations import mint_admin_key
from functions.offline.evals.tenants import EVAL_LIMITS, KEYS_FILE, EvalKeyError, ensure_eval_keys
from shared.api_keys import hash_api_key
from shared.fleet.tiers import Tier
from shared.storage.accounts import TenantPurpose
from shared.storage.sqlite.accounts import SQLiteStore
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import scripted_worker


@pytest.fixture
def gateway(gateway_for: GatewayFactory) -> Iterator[Gateway]:
    with serve(scripted_worker("Hello.")) as mini, serve(scripted_worker("Hello.")) as flagship:
        yield gateway_for({"mini": [mini], "flagship": [flagship]})


def open_store(gateway: Gateway) -> SQLiteStore:
    return SQLiteStore(gateway.data_dir / "fleetchat.db")


def eval_tenants(gateway: Gateway) -> list:
    store = open_store(gateway)
    try:
        return [t for t in store.list_tenants() if t.purpose is TenantPurpose.EVAL]
    finally:
        store.close()


def test_eval_tenants_are_created_once_and_their_keys_kept_private(gateway: Gateway, tmp_path: Path) -> None:
    store = open_store(gateway)
    admin = mint_admin_key(store, "eval").key
    store.close()
    keys_path = tmp_path / "reports" / KEYS_FILE
    keys = ensure_eval_keys(gateway.url, keys_path, admin_key=admin)
    assert set(keys) == {Tier.FREE, Tier.PLUS}
    assert stat.S_IMODE(keys_path.stat().st_mode) == 0o600
    created = eval_tenants(gateway)
    assert sorted((t.name, t.tier) for t in created) == [("eval-free", Tier.FREE), ("eval-plus", Tier.PLUS)]
    assert all(t.limits is not None and t.limits.message_cap == EVAL_LIMITS["message_cap"] for t in created)
    models = httpx.get(f"{gateway.url}/v1/models", headers={"authorization": f"Bearer {keys[Tier.FREE]}"}).json()
    chat = [card["id"] for card in models["data"] if card["capabilities"]["chat_completions"]]
    assert chat == ["mini"]  # the tier's pools, unchanged

    assert ensure_eval_keys(gateway.url, keys_path, admin_key=admin) == keys  # reused: nothing new
    assert ensure_eval_keys(gateway.url, keys_path) == keys  # no admin key needed for known keys
    assert len(eval_tenants(gateway)) == 2

    store = open_store(gateway)
    try:
        record = store.find_key(hash_api_key(keys[Tier.PLUS]))
        assert record is not None
        store.revoke_key(record.id)
    finally:
        store.close()
    with pytest.raises(EvalKeyError, match="no eval key for tier 'plus'"):
        ensure_eval_keys(gateway.url, keys_path)  # a revoked key, no admin key: refused, nothing created
    renewed = ensure_eval_keys(gateway.url, keys_path, admin_key=admin)
    assert renewed[Tier.FREE] == keys[Tier.FREE] and renewed[Tier.PLUS] != keys[Tier.PLUS]
    assert json.loads(keys_path.read_text())["keys"]["plus"] == renewed[Tier.PLUS]


def test_given_keys_are_used_as_they_are_and_a_bad_admin_key_is_refused(gateway: Gateway, tmp_path: Path) -> None:
    keys_path = tmp_path / KEYS_FILE
    with pytest.raises(EvalKeyError, match="admin key was refused"):
        ensure_eval_keys(gateway.url, keys_path, given={Tier.FREE: "sk-given"}, admin_key="fc-not-an-admin")
    assert eval_tenants(gateway) == [] and not keys_path.exists()
    only_given = ensure_eval_keys(gateway.url, keys_path, given={Tier.FREE: "a", Tier.PLUS: "b"}, admin_key=None)
    assert only_given == {Tier.FREE: "a", Tier.PLUS: "b"} and not keys_path.exists()

"""AWS-only behaviour of the account stores, against moto over HTTP: layout, atomicity, TTLs, retries, contention."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from shared.api_keys import hash_api_key, new_api_key
from shared.fleet.tiers import Tier
from shared.storage.accounts import TenantPurpose
from shared.storage.aws import safety_audit as aws_safety_audit
from shared.storage.aws.accounts import AwsTenantStore
from shared.storage.aws.accounts_layout import (
    LEDGER_INDEX,
    LEDGER_INDEX_ATTRIBUTES,
    AccountsTable,
    AwsAccountsConfig,
    ensure_accounts_table,
)
from shared.storage.aws.layout import TTL_GRACE
from shared.storage.aws.ledger import AwsLedger, AwsMeterState
from shared.storage.aws.limits import AwsRateLimits
from shared.storage.aws.safety_audit import AwsSafetyAudit
from shared.storage.conversations import StoreUnavailableError
from shared.storage.ledger import MeterSend
from shared.storage.limits import COUNTER_RETENTION_S, WindowCount
from shared.storage.timestamps import to_iso
from tests.storage.contracts.test_ledger_contract import T0, _entry
from tests.storage.contracts.test_limits_contract import WINDOW, _charge
from tests.storage.contracts.test_safety_audit_contract import audit, never_held
from tests.storage.test_aws_adapter import THROTTLED, UNAVAILABLE, FaultProxy
from tests.support.moto_server import unique_names
from tests.support.processes import free_port


def _dynamodb_error(code: str, **fields: Any) -> tuple[int, dict[str, str], str]:
    body = {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": code, **fields}
    return 400, {"Content-Type": "application/x-amz-json-1.0"}, json.dumps(body)


# Another replica's transaction holds an item: on a transaction, and on a single-item write.
TRANSACTION_CONFLICT = _dynamodb_error(
    "TransactionCanceledException", CancellationReasons=[{"Code": "TransactionConflict"}, {"Code": "None"}]
)
ITEM_CONFLICT = _dynamodb_error("TransactionConflictException")


@pytest.fixture
def config(aws_env: None, moto_endpoint: str) -> AwsAccountsConfig:
    config = AwsAccountsConfig(table_name=unique_names()[0], endpoint_url=moto_endpoint)
    ensure_accounts_table(config)
    return config


@pytest.fixture
def open_store(config: AwsAccountsConfig) -> Iterator[Callable[..., Any]]:
    """Opens an adapter class on the test's table, with config changes; closes them all at the end."""
    opened: list[AccountsTable] = []

    def open_with(kind: type[AccountsTable], **changes: Any) -> Any:
        opened.append(kind(config.model_copy(update=changes)))
        return opened[-1]

    yield open_with
    for store in opened:
        store.close()


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(moto_endpoint)
    yield proxy
    proxy.close()


def table_items(config: AwsAccountsConfig) -> list[dict[str, Any]]:
    ddb = boto3.resource("dynamodb", endpoint_url=config.endpoint_url, region_name=config.region)
    return ddb.Table(config.table_name).scan(ConsistentRead=True)["Items"]


def keys_of(config: AwsAccountsConfig) -> set[tuple[str, str]]:
    return {(item["pk"], item["sk"]) for item in table_items(config)}


def record_calls(store: AccountsTable) -> list[tuple[str, dict[str, Any]]]:
    """Every DynamoDB call the store makes from now on: (operation, parameters as given)."""
    calls: list[tuple[str, dict[str, Any]]] = []
    store._ddb.meta.events.register(
        "provide-client-params.dynamodb", lambda params, model, **_: calls.append((model.name, dict(params)))
    )
    return calls


# -- layout -------------------------------------------------------------------------------------------------------


def test_table_has_one_sparse_ledger_index_and_ttl(config) -> None:
    ensure_accounts_table(config)  # idempotent
    ddb = boto3.client("dynamodb", endpoint_url=config.endpoint_url, region_name=config.region)
    table = ddb.describe_table(TableName=config.table_name)["Table"]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    [index] = table["GlobalSecondaryIndexes"]
    assert index["IndexName"] == LEDGER_INDEX
    assert index["Projection"] == {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(LEDGER_INDEX_ATTRIBUTES)}
    ttl = ddb.describe_time_to_live(TableName=config.table_name)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", "expires_at")


def test_key_items_hold_only_hashes(config, open_store) -> None:
    store = open_store(AwsTenantStore)
    tenant = store.create_tenant("acme", Tier.PLUS)
    key, admin = new_api_key(), new_api_key()
    record = store.add_api_key(tenant.id, hash_api_key(key), "laptop", hint=key[:7])
    store.add_admin_key(hash_api_key(admin), "ops")
    items = table_items(config)
    assert key not in repr(items) and admin not in repr(items)
    assert key[7:20] not in repr(items) and admin[3:20] not in repr(items)
    assert keys_of(config) == {
        (f"TENANT#{tenant.id}", "TENANT"),
        ("TENANTS", f"{to_iso(tenant.created_at)}#{tenant.id}"),
        (f"TENANT#{tenant.id}", f"KEY#{record.id}"),
        (f"KEYHASH#{hash_api_key(key)}", "KEYHASH"),
        (f"KEYID#{record.id}", "KEYID"),
        (f"ADMINKEY#{hash_api_key(admin)}", "ADMINKEY"),
    }


def test_auth_is_two_consistent_reads(open_store) -> None:
    store = open_store(AwsTenantStore)
    tenant = store.create_tenant("acme", Tier.FREE)
    key = new_api_key()
    store.add_api_key(tenant.id, hash_api_key(key), "k")
    calls = record_calls(store)
    assert store.find_key_with_tenant(hash_api_key(key)) is not None
    assert [name for name, _ in calls] == ["GetItem", "BatchGetItem"]
    assert calls[0][1]["ConsistentRead"] is True
    assert all(request["ConsistentRead"] is True for request in calls[1][1]["RequestItems"].values())


def test_failed_multi_item_writes_leave_nothing_behind(config, open_store) -> None:
    store = open_store(AwsTenantStore)
    acme, other = store.create_tenant("acme", Tier.PLUS), store.create_tenant("other", Tier.PLUS)
    someone = store.create_user(other.id, "ada@example.com", None)
    taken = hash_api_key(new_api_key())
    store.add_api_key(acme.id, taken, "first")
    before = keys_of(config)
    with pytest.raises(ValueError):
        store.add_api_key(other.id, taken, "same hash")
    with pytest.raises(ValueError):
        store.add_api_key(acme.id, hash_api_key(new_api_key()), "owner of another tenant", user_id=someone.id)
    with pytest.raises(ValueError):
        store.add_api_key("ten_missing", hash_api_key(new_api_key()), "no tenant")
    with pytest.raises(ValueError):
        store.create_user("ten_missing", "bob@example.com", None)
    assert keys_of(config) == before


# -- admission counters --------------------------------------------------------------------------------------------


def test_a_refused_charge_writes_nothing_even_when_its_read_was_stale(config, open_store, monkeypatch) -> None:
    limits = open_store(AwsRateLimits)
    assert limits.charge([_charge("key:a", tokens=600), _charge("tenant:t", tokens=600)]).admitted
    before = table_items(config)
    refused = limits.charge([_charge("key:b", tokens=500), _charge("tenant:t", tokens=500)])  # refused on the read
    assert (refused.admitted, refused.refused_scope, refused.refused_by) == (False, "tenant:t", "tokens")
    # Another replica filled the window after this one read it: the transaction's condition refuses it.
    stale = [WindowCount(scope=s, window_start=WINDOW, requests=0, tokens=0) for s in ("key:b", "tenant:t")]
    monkeypatch.setattr(limits, "_counts", lambda charges: list(stale))
    raced = limits.charge([_charge("key:b", tokens=500), _charge("tenant:t", tokens=500)])
    assert (raced.admitted, raced.refused_scope, raced.refused_by) == (False, "tenant:t", "tokens")
    assert [(c.requests, c.tokens) for c in raced.counts] == [(0, 0), (1, 600)]  # as found by the condition
    assert table_items(config) == before  # key:b's counter was not even created


def test_counters_expire_an_hour_after_their_window_and_settling_never_creates_one(config, open_store) -> None:
    limits = open_store(AwsRateLimits)
    assert limits.charge([_charge("key:a"), _charge("tenant:t")]).admitted
    assert limits.charge([_charge("key:solo", window_start=WINDOW + 60)]).admitted
    limits.settle("key:gone", WINDOW, 50)
    limits.settle("key:gone", WINDOW, -50)
    counters = {item["pk"]: item for item in table_items(config)}
    assert set(counters) == {"RL#key:a", "RL#tenant:t", "RL#key:solo"}
    assert counters["RL#key:a"]["expires_at"] == WINDOW + 60 + COUNTER_RETENTION_S
    assert counters["RL#key:solo"]["expires_at"] == WINDOW + 120 + COUNTER_RETENTION_S


def test_message_logs_expire_after_their_window(config, open_store) -> None:
    limits = open_store(AwsRateLimits)
    t0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    limits.record_message("tenant:f", t0 + timedelta(minutes=5), 3600, cap=3)
    limits.record_message("tenant:f", t0, 3600, cap=3)  # out of order: the log stays sorted
    [log] = table_items(config)
    assert log["log"] == ["2026-11-22T12:00:00.000000Z", "2026-11-22T12:05:00.000000Z"] and log["version"] == 2
    assert log["expires_at"] == int((t0 + timedelta(minutes=5)).timestamp()) + 3600 + COUNTER_RETENTION_S


# -- ledger and meter state ------------------------------------------------------------------------------------------


def test_concurrent_duplicates_record_once(config, open_store) -> None:
    ledgers = [open_store(AwsLedger) for _ in range(4)]
    start = threading.Barrier(8)

    def record(i: int) -> bool:
        start.wait()
        return ledgers[i % 4].record(_entry("req_dup", prompt=100 + i))

    with ThreadPoolExecutor(max_workers=8) as pool:
        written = list(pool.map(record, range(8)))
    assert sum(written) == 1
    winner = 100 + written.index(True)
    [row] = ledgers[0].usage("ten_a", T0, T0 + timedelta(hours=1))
    assert (row.requests, row.prompt_tokens) == (1, winner)
    assert {item["pk"] for item in table_items(config)} == {"LEDGER#ten_a", "REQ#req_dup"}


def test_totals_and_outbox_never_scan(open_store, proxy) -> None:
    ledger, meter = open_store(AwsLedger, endpoint_url=proxy.url), open_store(AwsMeterState, endpoint_url=proxy.url)
    start = datetime(2026, 11, 21, 10, tzinfo=UTC)
    for i in range(20):
        ledger.record(_entry(f"r{i}", tenant=f"ten_{i % 3}", at=start + timedelta(minutes=3 * i)))
    window = datetime(2026, 11, 21, 10, tzinfo=UTC)
    meter.add_pending(
        MeterSend(identifier="m1", tenant_id="t", customer_id="cus_A", meter="m", window_start=window, value=1)
    )
    proxy.reset()
    totals = ledger.totals(start, start + timedelta(hours=1))
    assert [(t.tenant_id, t.requests) for t in totals] == [("ten_0", 7), ("ten_1", 7), ("ten_2", 6)]
    assert [s.identifier for s in meter.pending()] == ["m1"]
    assert meter.sends(window, window + timedelta(hours=1))[0].identifier == "m1"
    assert set(proxy.seen) == {"Query"}


# -- safety audit ---------------------------------------------------------------------------------------------------


def test_safety_audit_items_and_their_ttl_backstop(config, open_store) -> None:
    store = open_store(AwsSafetyAudit)
    expiring = audit("req_1", tenant="ten_a", expires_at=T0 + timedelta(days=30))
    assert store.record(expiring)
    assert store.record(audit("req_2", tenant="ten_a", at=T0 + timedelta(seconds=1)))  # kept until deleted
    items = {(item["pk"], item["sk"]): item for item in table_items(config)}
    shard = aws_safety_audit.expiry_key(expiring, T0)["pk"]
    record_sk = f"{to_iso(T0)}#req_1#pre"
    ttl = int((T0 + timedelta(days=30) + TTL_GRACE).timestamp())
    assert {key: item.get("expires_at") for key, item in items.items()} == {
        ("SAFETY#ten_a", record_sk): ttl,
        ("SAFETYREQ#req_1", "pre"): ttl,
        (shard, f"{to_iso(T0 + timedelta(days=30))}#ten_a#req_1#pre"): ttl,
        ("SAFETY#ten_a", f"{to_iso(T0 + timedelta(seconds=1))}#req_2#pre"): None,  # no expiry entry either
        ("SAFETYREQ#req_2", "pre"): None,
    }
    assert items[("SAFETY#ten_a", record_sk)]["expires_iso"] == to_iso(T0 + timedelta(days=30))


def test_safety_sweep_reads_only_due_entries_and_never_scans(open_store, proxy, monkeypatch) -> None:
    monkeypatch.setattr(aws_safety_audit, "_PAGE", 2)  # several pages per shard
    store = open_store(AwsSafetyAudit, endpoint_url=proxy.url)
    for i in range(30):
        store.record(audit(f"later_{i}", at=T0 + timedelta(seconds=i), expires_at=T0 + timedelta(days=60)))
    for i in range(12):
        store.record(audit(f"due_{i}", at=T0 + timedelta(seconds=i), expires_at=T0 + timedelta(days=1, hours=i)))
    read: list[int] = []
    store._ddb.meta.events.register("after-call.dynamodb.Query", lambda parsed, **_: read.append(parsed["Count"]))
    proxy.reset()
    now = T0 + timedelta(days=2)
    assert store.count_due(now, never_held, limit=100) == 12
    assert sum(read) == 12  # no unexpired entry was read
    assert set(proxy.seen) == {"Query"}
    assert store.sweep(now, never_held, limit=5) == 5
    assert store.sweep(now, never_held) == 7
    assert set(proxy.seen) == {"Query", "TransactWriteItems"}
    listed = store.list_for_tenant("ten_a", T0, T0 + timedelta(days=1), limit=25)
    assert [r.request_id for r in listed] == [f"later_{i}" for i in reversed(range(5, 30))]


def test_a_held_tenants_due_items_lose_their_ttl(config, open_store) -> None:
    store = open_store(AwsSafetyAudit)
    store.record(audit("req_held", tenant="ten_held", expires_at=T0 + timedelta(days=1)))
    now = T0 + timedelta(days=2)
    assert store.count_due(now, lambda tenant: True) == 0
    assert all("expires_at" in item for item in table_items(config))  # the dry run changes nothing
    assert store.sweep(now, lambda tenant: True) == 0
    items = table_items(config)
    assert len(items) == 3 and all("expires_at" not in item for item in items)  # DynamoDB cannot beat the hold
    assert store.sweep(now, lambda tenant: True) == 0  # kept already: nothing more to write
    assert store.sweep(now, never_held) == 1  # the hold is lifted
    assert table_items(config) == []


def test_a_record_the_ttl_took_leaves_no_strays(config, open_store) -> None:
    store = open_store(AwsSafetyAudit)
    record = audit("req_gone", expires_at=T0 + timedelta(days=1))
    store.record(record)
    ddb = boto3.client("dynamodb", endpoint_url=config.endpoint_url, region_name=config.region)
    key = aws_safety_audit.record_key(record)
    ddb.delete_item(TableName=config.table_name, Key={name: {"S": value} for name, value in key.items()})
    assert store.sweep(T0 + timedelta(days=2), never_held) == 0  # not counted: the sweep did not delete it
    assert table_items(config) == []


def test_concurrent_duplicate_audit_records_write_once(config, open_store) -> None:
    stores = [open_store(AwsSafetyAudit) for _ in range(4)]
    start = threading.Barrier(8)

    def record(i: int) -> bool:
        start.wait()
        return stores[i % 4].record(audit("req_dup", score=i / 10, expires_at=T0 + timedelta(days=1)))

    with ThreadPoolExecutor(max_workers=8) as pool:
        written = list(pool.map(record, range(8)))
    assert sum(written) == 1
    [kept] = stores[0].list_for_tenant("ten_a", T0, T0 + timedelta(days=1))
    assert kept.score == written.index(True) / 10
    assert len(table_items(config)) == 3


# -- retries and failures ---------------------------------------------------------------------------------------------


def test_throttling_and_5xx_are_retried(open_store, proxy) -> None:
    limits, tenants = (
        open_store(AwsRateLimits, endpoint_url=proxy.url),
        open_store(AwsTenantStore, endpoint_url=proxy.url),
    )
    proxy.fail(2, THROTTLED)
    assert limits.charge([_charge("key:a"), _charge("tenant:t")]).admitted
    assert proxy.seen == ["BatchGetItem"] * 3 + ["TransactWriteItems"]
    proxy.fail(3, UNAVAILABLE)
    tenant = tenants.create_tenant("acme", Tier.FREE)
    assert proxy.count("TransactWriteItems") == 4
    assert tenants.get_tenant(tenant.id) == tenant  # the retried transaction landed once


def test_conflicts_are_retried_past_the_retry_attempts(open_store, proxy) -> None:
    ledger = open_store(AwsLedger, endpoint_url=proxy.url)
    limits = open_store(AwsRateLimits, endpoint_url=proxy.url)
    proxy.fail(6, TRANSACTION_CONFLICT)  # more than max_attempts: contention is not an outage
    assert ledger.record(_entry("req_1"))
    assert proxy.count("TransactWriteItems") == 7
    proxy.fail(6, ITEM_CONFLICT)
    outcome = limits.charge([_charge("key:hot")])  # one charge: a single UpdateItem
    assert outcome.admitted and outcome.counts[0].requests == 1
    assert proxy.count("UpdateItem") == 7


def test_endless_contention_and_conditions_are_handled(open_store, proxy) -> None:
    limits = open_store(AwsRateLimits, endpoint_url=proxy.url, contention_budget_s=0.3)
    proxy.fail(1000, ITEM_CONFLICT)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        limits.charge([_charge("key:hot")])
    assert time.monotonic() - started < 2
    proxy.fail(0, ITEM_CONFLICT)
    for _ in range(5):
        limits.charge([_charge("key:full")])
    proxy.reset()
    assert not limits.charge([_charge("key:full")]).admitted
    assert proxy.count("UpdateItem") == 1  # a failed condition is an answer, tried once


def test_dead_endpoint_fails_fast_with_store_unavailable(open_store) -> None:
    dead = open_store(AwsTenantStore, endpoint_url=f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        dead.find_key_with_tenant(hash_api_key(new_api_key()))
    assert time.monotonic() - started < 3


def test_a_tenant_item_written_before_purposes_reads_as_a_customer(config, open_store) -> None:
    store = open_store(AwsTenantStore)
    tenant = store.create_tenant("old", Tier.PLUS, purpose=TenantPurpose.EVAL)
    ddb = boto3.client("dynamodb", endpoint_url=config.endpoint_url)
    key = {"pk": {"S": f"TENANT#{tenant.id}"}, "sk": {"S": "TENANT"}}
    assert ddb.get_item(TableName=config.table_name, Key=key)["Item"]["purpose"] == {"S": "eval"}
    ddb.update_item(TableName=config.table_name, Key=key, UpdateExpression="REMOVE purpose")
    old = store.get_tenant(tenant.id)
    assert old is not None and old.purpose is TenantPurpose.CUSTOMER and old.billable

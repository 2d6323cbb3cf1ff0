"""The AWS accounts table: config, creation, layout, keys, item <-> record codecs and the calls its adapters share."""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Callable, Iterator
from datetime import datetime
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field
from tenacity import Retrying, retry_if_exception, stop_after_delay
from tenacity.wait import wait_random_exponential

from shared.fleet.tiers import LimitOverrides, SafetyOverrides, Tier
from shared.storage.accounts import AdminKeyRecord, ApiKeyRecord, Tenant, TenantPurpose, User
from shared.storage.aws.layout import TTL_ATTRIBUTE, clients, key_schema
from shared.storage.aws.retry import Retrier, cancel_reasons, error_code
from shared.storage.conversations import StoreUnavailableError
from shared.storage.ledger import LedgerEntry, MeterSend
from shared.storage.memory import Memory
from shared.storage.timestamps import from_iso, optional_from_iso, optional_iso, to_iso

# One DynamoDB table (`fleetchat-accounts`) for accounts, admission counters, the ledger and the meter outbox.
# String keys `pk`/`sk`; `expires_at` (epoch seconds) is the TTL attribute (only counters, message logs and safety
# audit items carry it).
#   tenant        pk=TENANT#{tenant}    sk=TENANT                         the record; limits, safety as maps
#   directory     pk=TENANTS            sk={created_at}#{tenant}          list_tenants, oldest first (pointer only)
#   user          pk=TENANT#{tenant}    sk=USER#{user}
#   email guard   pk=TENANT#{tenant}    sk=EMAIL#{email}                  an email once per tenant
#   API key       pk=TENANT#{tenant}    sk=KEY#{key}                      the record: hash, label, revoked_at, ...
#   hash pointer  pk=KEYHASH#{sha256}   sk=KEYHASH                        auth: hash -> (tenant, key); a hash once
#   id pointer    pk=KEYID#{key}        sk=KEYID                          revoke by key id alone: key -> tenant
#   admin key     pk=ADMINKEY#{sha256}  sk=ADMINKEY                       the record
#   counter       pk=RL#{scope}         sk=W#{window_start:012d}          requests, tokens; TTL window end + 1 h
#   message log   pk=MSG#{subject}      sk=LOG                            log (sorted ISO list), version; TTL
#   ledger entry  pk=LEDGER#{tenant}    sk={created_at}#{request}         + hour_pk=HOUR#{yyyy-mm-ddThh}#{0..7}
#   request guard pk=REQ#{request}      sk=REQ                            a request id once, ever
#   meter send    pk=METER              sk=SEND#{window_start}#{identifier}
#   pending send  pk=METER              sk=PENDING#{window_start}#{identifier}   a copy, deleted once sent
#   identifier    pk=METER              sk=ID#{identifier}                an identifier once -> its window_start
#   meter cursor  pk=METER              sk=CURSOR
#   safety audit  pk=SAFETY#{tenant}    sk={at}#{request}#{layer}         the record (expiry as expires_iso)
#   audit guard   pk=SAFETYREQ#{request} sk={layer}                       a (request, layer) once -> tenant, record sk
#   audit expiry  pk=SAFETYEXP#{0..7}   sk={expires_iso}#{tenant}#{request}#{layer}   -> the record; expiring only
# Safety audit items (keys and codecs in aws_safety_audit.py) carry the TTL expires_iso + TTL_GRACE as a backstop
# only: the sweep deletes them, and takes the TTL off a held tenant's due items so that DynamoDB never beats a hold.
# The expiry entries are sharded by crc32(request id) % 8 rather than by day, so the sweep reads exactly the due
# entries of 8 partitions (sk < {now}$) without having to know which days have any.
# Keys are only ever stored as SHA-256 hashes. Every read the adapters make is consistent except totals(), which
# reads the one index: `ledger_by_hour` (hour_pk, sk), sparse (ledger entries only), projecting the token counts.
# Hour buckets are sharded (crc32(request id) % 8) so that one hour's writes spread over 8 index partitions. Time
# ranges are `sk BETWEEN {start} AND {end}`, exactly [start, end): `{end}#...` sorts after `{end}`.
# Access patterns (none scans):
#   find_key_with_tenant  GetItem hash pointer, then BatchGetItem key record + tenant (2 round trips, per request)
#   find_key, revoke_key  GetItem hash / id pointer, then GetItem / UpdateItem SET revoked_at = if_not_exists(...)
#   create_tenant         TransactWriteItems: Put record + Put directory entry (attribute_not_exists)
#   list_tenants          Query TENANTS, then BatchGetItem the records
#   update_tenant         UpdateItem SET/REMOVE if attribute_exists, ALL_NEW
#   create_user           TransactWriteItems: ConditionCheck tenant, Put user, Put email guard
#   add_api_key           TransactWriteItems: ConditionCheck tenant (+ owner), Put record, hash and id pointers
#   list_users, list_keys Query TENANT#{tenant} begins_with USER# / KEY#
#   charge                one: UpdateItem conditional ADD; several: BatchGetItem (refuse on it), then one
#                         TransactWriteItems of conditional ADDs
#   settle                UpdateItem ADD if tokens >= -delta, else SET 0 if tokens < -delta; never creates
#   record/forget_message GetItem, then PutItem conditional on the log's version (redone when another replica won)
#   record (ledger)       TransactWriteItems: Put request guard + Put entry (attribute_not_exists)
#   usage / totals        Query LEDGER#{tenant} by sk range / Query ledger_by_hour, each hour x shard, by sk range
#   add_pending           TransactWriteItems: Put identifier guard, record, pending copy
#   mark_sent             GetItem identifier guard, then TransactWriteItems: Update sent_at if_not_exists, Delete copy
#   pending, sends        Query METER begins_with PENDING# / sk BETWEEN SEND#{start} AND SEND#{end}
#   record (safety)       TransactWriteItems: Put guard + Put record (+ Put expiry entry) (attribute_not_exists)
#   list_for_tenant       Query SAFETY#{tenant} by sk range, newest first (ScanIndexForward false, Limit)
#   sweep / count_due     Query each SAFETYEXP#{shard} up to now, merged in expiry order; per due record one
#                         TransactWriteItems: Delete record (attribute_exists) + guard + entry, or for a held
#                         tenant's, Update REMOVE expires_at on the three (attribute_exists); count_due only reads
LEDGER_INDEX = "ledger_by_hour"
# `model` tells embedding entries (their own meter) from chat's, `price_class` batch entries (the batch meters) from
# interactive ones; adding an attribute to a deployed table replaces the index.
LEDGER_INDEX_ATTRIBUTES = ("tenant_id", "model", "prompt_tokens", "completion_tokens", "cached_tokens", "price_class")
LEDGER_SHARDS = 8
TENANTS_PK = "TENANTS"
METER_PK = "METER"
CURSOR_SK = "CURSOR"

__all__ = ["TTL_ATTRIBUTE", "AccountsTable", "AwsAccountsConfig", "ensure_accounts_table"]


class AwsAccountsConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    table_name: str
    region: str = "us-east-1"
    endpoint_url: str | None = None
    max_attempts: int = Field(default=4, ge=1)
    retry_budget_s: float = Field(default=3.0, gt=0)
    # How long a write keeps retrying (with jitter) while other replicas hold its items: transaction conflicts on
    # hot counters and lost optimistic-lock races on message logs. Past it, the store counts as unavailable (503).
    contention_budget_s: float = Field(default=5.0, gt=0)


def ensure_accounts_table(config: AwsAccountsConfig) -> None:
    """Create the table (its index, TTL on `expires_at`) where missing; safe to run again."""
    ddb = dynamodb(config)
    try:
        ddb.create_table(
            TableName=config.table_name,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": name, "AttributeType": "S"} for name in ("pk", "sk", "hour_pk")],
            KeySchema=key_schema("pk", "sk"),
            GlobalSecondaryIndexes=[
                {
                    "IndexName": LEDGER_INDEX,
                    "KeySchema": key_schema("hour_pk", "sk"),
                    "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(LEDGER_INDEX_ATTRIBUTES)},
                }
            ],
        )
    except ClientError as exc:
        if error_code(exc) != "ResourceInUseException":
            raise
    ddb.get_waiter("table_exists").wait(TableName=config.table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    ttl = ddb.describe_time_to_live(TableName=config.table_name)["TimeToLiveDescription"]
    if ttl.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
        ddb.update_time_to_live(
            TableName=config.table_name, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE}
        )


def dynamodb(config: AwsAccountsConfig) -> Any:
    """A thread-safe DynamoDB client that takes and returns plain Python values (numbers come back as Decimal)."""
    ddb, s3 = clients(config)  # type: ignore[arg-type]  # it reads only region and endpoint_url
    s3.close()
    return ddb


# -- keys ---------------------------------------------------------------------------------------------------------


def tenant_key(tenant_id: str) -> dict[str, str]:
    return {"pk": f"TENANT#{tenant_id}", "sk": "TENANT"}


def directory_key(tenant: Tenant) -> dict[str, str]:
    return {"pk": TENANTS_PK, "sk": f"{to_iso(tenant.created_at)}#{tenant.id}"}


def user_key(tenant_id: str, user_id: str) -> dict[str, str]:
    return {"pk": f"TENANT#{tenant_id}", "sk": f"USER#{user_id}"}


def email_key(tenant_id: str, email: str) -> dict[str, str]:
    return {"pk": f"TENANT#{tenant_id}", "sk": f"EMAIL#{email}"}


def api_key_key(tenant_id: str, key_id: str) -> dict[str, str]:
    return {"pk": f"TENANT#{tenant_id}", "sk": f"KEY#{key_id}"}


def hash_pointer_key(key_hash: str) -> dict[str, str]:
    return {"pk": f"KEYHASH#{key_hash}", "sk": "KEYHASH"}


def id_pointer_key(key_id: str) -> dict[str, str]:
    return {"pk": f"KEYID#{key_id}", "sk": "KEYID"}


def admin_key_key(key_hash: str) -> dict[str, str]:
    return {"pk": f"ADMINKEY#{key_hash}", "sk": "ADMINKEY"}


def counter_key(scope: str, window_start: int) -> dict[str, str]:
    return {"pk": f"RL#{scope}", "sk": f"W#{window_start:012d}"}


def message_log_key(subject: str) -> dict[str, str]:
    return {"pk": f"MSG#{subject}", "sk": "LOG"}


def ledger_pk(tenant_id: str) -> str:
    return f"LEDGER#{tenant_id}"


def request_guard_key(request_id: str) -> dict[str, str]:
    return {"pk": f"REQ#{request_id}", "sk": "REQ"}


def hour_pk(hour: datetime, shard: int) -> str:
    """The index partition of one shard of one UTC hour: `HOUR#2026-11-21T10#3`."""
    return f"HOUR#{to_iso(hour)[:13]}#{shard}"


def send_sk(kind: str, window_start: datetime, identifier: str) -> str:
    """`SEND#…` (the record) or `PENDING#…` (its copy while unconfirmed): window order, then identifier."""
    return f"{kind}#{to_iso(window_start)}#{identifier}"


def identifier_key(identifier: str) -> dict[str, str]:
    return {"pk": METER_PK, "sk": f"ID#{identifier}"}


# -- codecs -------------------------------------------------------------------------------------------------------


def compact(item: dict[str, Any]) -> dict[str, Any]:
    """The item without its None attributes (DynamoDB stores absence, not nulls)."""
    return {name: value for name, value in item.items() if value is not None}


def integer(value: Any) -> int | None:
    """A number attribute (DynamoDB returns Decimal) as int; None stays None."""
    return None if value is None else int(value)


def limits_map(limits: LimitOverrides | dict[str, Any] | None) -> dict[str, int] | None:
    return None if limits is None else LimitOverrides.model_validate(limits).model_dump(exclude_none=True)


def safety_map(safety: SafetyOverrides | dict[str, Any] | None) -> dict[str, bool] | None:
    return None if safety is None else SafetyOverrides.model_validate(safety).model_dump(exclude_none=True)


def tenant_attribute(name: str, value: Any) -> Any:
    """A changed tenant field (TenantChanges.changed()) as its attribute value (None: remove it)."""
    if name == "limits":
        return limits_map(value)
    if name == "safety":
        return safety_map(value)
    return value.value if isinstance(value, Tier) else value


def tenant_item(tenant: Tenant) -> dict[str, Any]:
    return compact(
        {
            **tenant_key(tenant.id),
            "tenant_id": tenant.id,
            "name": tenant.name,
            "tier": tenant.tier.value,
            "created_at": to_iso(tenant.created_at),
            "retention_days": tenant.retention_days,
            "legal_hold": tenant.legal_hold,
            "limits": limits_map(tenant.limits),
            "stripe_customer_id": tenant.stripe_customer_id,
            "safety": safety_map(tenant.safety),
            "purpose": tenant.purpose.value,
            "instructions": tenant.instructions,
            "memory": None if tenant.memory is None else tenant.memory.model_dump_json(),
            "sharing_disabled": tenant.sharing_disabled or None,
        }
    )


def tenant_from_item(item: dict[str, Any]) -> Tenant:
    limits, safety = item.get("limits"), item.get("safety")
    return Tenant(
        id=item["tenant_id"],
        name=item["name"],
        tier=Tier(item["tier"]),
        created_at=from_iso(item["created_at"]),
        retention_days=integer(item.get("retention_days")),
        legal_hold=bool(item.get("legal_hold", False)),
        limits=None if limits is None else LimitOverrides(**{k: integer(v) for k, v in limits.items()}),
        stripe_customer_id=item.get("stripe_customer_id"),
        safety=None if safety is None else SafetyOverrides(**safety),
        # Items written before purposes existed are customers.
        purpose=TenantPurpose(item.get("purpose", TenantPurpose.CUSTOMER.value)),
        instructions=item.get("instructions"),
        # JSON text (shared/storage/memory.py), written only by update_memory's conditional write.
        memory=None if item.get("memory") is None else Memory.model_validate_json(item["memory"]),
        sharing_disabled=bool(item.get("sharing_disabled", False)),
    )


def user_item(user: User) -> dict[str, Any]:
    fields = {"user_id": user.id, "tenant_id": user.tenant_id, "email": user.email, "name": user.name}
    return compact({**user_key(user.tenant_id, user.id), **fields, "created_at": to_iso(user.created_at)})


def user_from_item(item: dict[str, Any]) -> User:
    return User(
        id=item["user_id"],
        tenant_id=item["tenant_id"],
        email=item["email"],
        name=item.get("name"),
        created_at=from_iso(item["created_at"]),
    )


def api_key_item(record: ApiKeyRecord) -> dict[str, Any]:
    return compact(
        {
            **api_key_key(record.tenant_id, record.id),
            **record.model_dump(exclude={"id", "created_at", "revoked_at"}),
            "key_id": record.id,
            "created_at": to_iso(record.created_at),
            "revoked_at": optional_iso(record.revoked_at),
        }
    )


def api_key_from_item(item: dict[str, Any]) -> ApiKeyRecord:
    return ApiKeyRecord(
        id=item["key_id"],
        tenant_id=item["tenant_id"],
        key_hash=item["key_hash"],
        label=item["label"],
        created_at=from_iso(item["created_at"]),
        revoked_at=optional_from_iso(item.get("revoked_at")),
        user_id=item.get("user_id"),
        hint=item.get("hint", ""),
    )


def admin_key_item(record: AdminKeyRecord) -> dict[str, Any]:
    fields = {"admin_key_id": record.id, "key_hash": record.key_hash, "label": record.label}
    times = {"created_at": to_iso(record.created_at), "revoked_at": optional_iso(record.revoked_at)}
    return compact({**admin_key_key(record.key_hash), **fields, **times})


def admin_key_from_item(item: dict[str, Any]) -> AdminKeyRecord:
    return AdminKeyRecord(
        id=item["admin_key_id"],
        key_hash=item["key_hash"],
        label=item["label"],
        created_at=from_iso(item["created_at"]),
        revoked_at=optional_from_iso(item.get("revoked_at")),
    )


def ledger_item(entry: LedgerEntry) -> dict[str, Any]:
    created = to_iso(entry.created_at)
    shard = zlib.crc32(entry.request_id.encode()) % LEDGER_SHARDS
    return compact(
        {
            "pk": ledger_pk(entry.tenant_id),
            "sk": f"{created}#{entry.request_id}",
            "hour_pk": hour_pk(entry.created_at, shard),
            **entry.model_dump(exclude={"created_at", "outcome"}),
            "outcome": entry.outcome.value,
            "created_at": created,
        }
    )


def send_item(kind: str, send: MeterSend) -> dict[str, Any]:
    times = {"window_start": to_iso(send.window_start), "sent_at": optional_iso(send.sent_at)}
    sk = send_sk(kind, send.window_start, send.identifier)
    return compact({"pk": METER_PK, "sk": sk, **send.model_dump(exclude={"window_start", "sent_at"}), **times})


def send_from_item(item: dict[str, Any]) -> MeterSend:
    return MeterSend(
        identifier=item["identifier"],
        tenant_id=item["tenant_id"],
        customer_id=item["customer_id"],
        meter=item["meter"],
        window_start=from_iso(item["window_start"]),
        value=int(item["value"]),
        sent_at=optional_from_iso(item.get("sent_at")),
    )


def wire_item(raw: dict[str, Any] | None) -> dict[str, Any] | None:
    """An item inside an error (ALL_OLD on a failed condition): errors skip boto3's conversion to plain values."""
    return None if raw is None else {name: _DESERIALIZE(value) for name, value in raw.items()}


_DESERIALIZE = TypeDeserializer().deserialize


def ints(item: dict[str, Any], *names: str) -> dict[str, int]:
    """The named number attributes as ints (0 where absent)."""
    return {name: int(item.get(name, Decimal(0))) for name in names}


# -- the calls every adapter makes --------------------------------------------------------------------------------


def condition_failed(exc: BaseException) -> bool:
    """A condition did not hold: an answer (taken, missing, over the limit), never retried."""
    return error_code(exc) == "ConditionalCheckFailedException" or "ConditionalCheckFailed" in cancel_reasons(exc)


def is_conflict(exc: BaseException) -> bool:
    """Another writer's transaction held one of the items: retry soon, with jitter, and it resolves."""
    if error_code(exc) in ("TransactionConflictException", "TransactionInProgressException"):
        return True
    reasons = cancel_reasons(exc)
    return "TransactionConflict" in reasons and "ConditionalCheckFailed" not in reasons


class AccountsTable:
    """The DynamoDB client and the calls the account adapters share. Thread-safe; every call goes through retries:
    transient errors (throttling, 5xx, broken connections) through `aws_retry.Retrier`, contention on hot items
    (transaction conflicts) through a jittered loop inside it."""

    storage_name = "Account storage"  # what the errors call the table (a subclass may use another table)

    def __init__(self, config: AwsAccountsConfig) -> None:
        self.config = config
        self._ddb = dynamodb(config)
        self._call = Retrier(config.max_attempts, config.retry_budget_s)

    def close(self) -> None:
        self._ddb.close()

    def _write(self, fn: Callable[..., Any], /, **kwargs: Any) -> Any:
        """A write (single-item or transaction), retried through transient errors and through conflicts."""
        contended = Retrying(
            stop=stop_after_delay(self.config.contention_budget_s),
            wait=wait_random_exponential(multiplier=0.01, max=0.25),
            retry=retry_if_exception(is_conflict),
            reraise=True,
        )
        try:
            return self._call(lambda **args: contended(fn, **args), **kwargs)
        except ClientError as exc:
            if is_conflict(exc):  # still contended after the budget
                raise StoreUnavailableError(f"{self.storage_name} is too contended right now.") from exc
            raise

    def _get(self, key: dict[str, str]) -> dict[str, Any] | None:
        table = self.config.table_name
        return self._call(self._ddb.get_item, TableName=table, Key=key, ConsistentRead=True).get("Item")

    def _batch_get(self, keys: list[dict[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
        """The items that exist among `keys` (consistent reads), by (pk, sk)."""
        found: dict[tuple[str, str], dict[str, Any]] = {}
        table = self.config.table_name
        for start in range(0, len(keys), 100):  # BatchGetItem takes 100 keys at most
            pending: dict[str, Any] = {table: {"Keys": keys[start : start + 100], "ConsistentRead": True}}
            for _ in range(self.config.max_attempts * 4):
                answer = self._call(self._ddb.batch_get_item, RequestItems=pending)
                found.update({(item["pk"], item["sk"]): item for item in answer["Responses"].get(table, [])})
                if not (pending := answer.get("UnprocessedKeys") or {}):
                    break
            else:
                raise StoreUnavailableError(f"{self.storage_name} is throttling reads right now.")
        return found

    def _query(self, **query: Any) -> Iterator[dict[str, Any]]:
        while True:
            page = self._call(self._ddb.query, TableName=self.config.table_name, **query)
            yield from page["Items"]
            if "LastEvaluatedKey" not in page:
                return
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _query_partition(self, pk: str, sk_prefix: str = "") -> Iterator[dict[str, Any]]:
        """A partition's items in sort-key order (those whose sk starts with `sk_prefix`), read consistently."""
        condition, values = "#pk = :pk", {":pk": pk}
        if sk_prefix:  # begins_with refuses an empty prefix
            condition, values = f"{condition} AND begins_with(#sk, :prefix)", {**values, ":prefix": sk_prefix}
        return self._query(
            KeyConditionExpression=condition,
            ExpressionAttributeNames={"#pk": "pk", **({"#sk": "sk"} if sk_prefix else {})},
            ExpressionAttributeValues=values,
            ConsistentRead=True,
        )

    def _transact(self, items: list[dict[str, Any]]) -> bool:
        """Write `items` in one transaction: True, or False when one of their conditions did not hold.

        A token per call: a retry of a transaction that landed succeeds instead of failing its own conditions."""
        try:
            self._write(self._ddb.transact_write_items, TransactItems=items, ClientRequestToken=uuid.uuid4().hex)
            return True
        except ClientError as exc:
            if condition_failed(exc):
                return False
            raise

    def _put_new(self, item: dict[str, Any]) -> dict[str, Any]:
        """A transaction Put that fails if the item exists."""
        return {"TableName": self.config.table_name, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}

    def _exists(self, key: dict[str, str]) -> dict[str, Any]:
        """A transaction ConditionCheck that the item exists."""
        return {"TableName": self.config.table_name, "Key": key, "ConditionExpression": "attribute_exists(pk)"}

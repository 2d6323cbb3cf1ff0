"""The AWS conversation store's layout: config, table and bucket creation, keys, and item <-> record codecs."""

from __future__ import annotations

import functools
import hashlib
import re
import threading
import zlib
from datetime import datetime, timedelta
from typing import Any

import boto3
from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field

from shared.errors import InvalidRequestError
from shared.storage.aws.retry import CLIENT_CONFIG, error_code
from shared.storage.conversations import (
    AuditRecord,
    ConversationMeta,
    StoredMessage,
    SweepCandidate,
    decode_list_cursor,
    encode_list_cursor,
    sweep_time,
)
from shared.storage.timestamps import optional_from_iso as parse_iso
from shared.storage.timestamps import to_iso as iso

# One DynamoDB table, string keys `pk`/`sk`, tenant-partitioned:
#   record  pk=TENANT#{tenant}  sk=CONV#{conv}                    metadata + pointer `body_key`, never content
#   turn    pk=TENANT#{tenant}  sk=CONV#{conv}#TURN#{version:08d}   version, created_at, added, message_count
#   audit   pk=AUDIT            sk={at}#{digest of the record}     who removed what; rewriting one dedupes
# Sparse indexes: `by_updated` (pk, updated_key={updated_at}#{conv}) holds only records not soft-deleted;
# `by_sweep` (sweep_pk=SWEEP#{0..7}, sweep_sk={sweep time}#{conv}) only records with a sweep time.
# `expires_at` (epoch seconds) is the TTL attribute: sweep time + TTL_GRACE.
# Bodies are S3 objects `{tenant}/{conv}/{version}.json`, a full snapshot of the messages at that version (each with
# every `StoredMessage` field: an answer's finish reason, model and policy versions, a branch point's `parent`; absent
# in older bodies: None). The record's `current_node` (absent: the newest message) is the active branch: a turn's commit
# removes it, `set_current_node` sets it.
LIST_INDEX = "by_updated"
SWEEP_INDEX = "by_sweep"
SWEEP_SHARDS = 8  # spreads the sweep index over partitions; the sweep queries each shard
TTL_ATTRIBUTE = "expires_at"
TTL_GRACE = timedelta(days=7)  # DynamoDB's best-effort TTL must never beat the sweep, which deletes bodies and audits
AUDIT_PK = "AUDIT"
# Condition: the record exists and is visible at :now.
LIVE = (
    "attribute_exists(#pk) AND attribute_not_exists(#deleted_iso)"
    " AND (attribute_not_exists(#expires_iso) OR #expires_iso > :now)"
)


class AwsStoreConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    table_name: str
    bucket: str
    region: str = "us-east-1"
    endpoint_url: str | None = None
    kms_key_id: str | None = None  # SSE-KMS with this key; SSE-S3 (AES256) when None
    # The vector stores' LanceDB commit store (shared/storage/lance_vector_index.py): a DynamoDB table keyed
    # (base_uri, version), as Lance's S3 + DynamoDB commit protocol requires.
    vector_commit_table: str = "fleetchat-vector-commits"
    max_attempts: int = Field(default=4, ge=1)
    retry_budget_s: float = Field(default=3.0, gt=0)
    # An unreferenced body older than this is a crashed writer's and may be replaced. It must exceed the longest
    # put-to-commit time of a live writer (bounded by the client timeouts and the retry budget).
    orphan_reclaim_s: float = Field(default=60.0, ge=0)


class Body(BaseModel):
    """The S3 object: every message of the conversation at one version."""

    version: int
    message_count: int
    messages: list[StoredMessage]


_SESSION_LOCK = threading.Lock()


@functools.cache
def _session() -> boto3.session.Session:
    """One per process: a new session parses the service models again (~0.3 s per store)."""
    return boto3.session.Session()


def clients(config: AwsStoreConfig) -> tuple[Any, Any]:
    """(DynamoDB client that takes and returns plain Python values, S3 client); both thread-safe."""
    where = {"region_name": config.region, "endpoint_url": config.endpoint_url, "config": CLIENT_CONFIG}
    with _SESSION_LOCK:  # sessions are not thread-safe, the clients they make are
        return _session().resource("dynamodb", **where).meta.client, _session().client("s3", **where)


def ensure_resources(config: AwsStoreConfig) -> None:
    """Create the table (both indexes, TTL on `expires_at`), the vector stores' commit table and the bucket where
    missing; safe to run again."""
    ddb, s3 = clients(config)

    def index(name: str, hash_key: str, range_key: str) -> dict[str, Any]:
        projection = {"ProjectionType": "ALL"}
        return {"IndexName": name, "KeySchema": key_schema(hash_key, range_key), "Projection": projection}

    try:
        ddb.create_table(
            TableName=config.table_name,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[
                {"AttributeName": name, "AttributeType": "S"}
                for name in ("pk", "sk", "updated_key", "sweep_pk", "sweep_sk")
            ],
            KeySchema=key_schema("pk", "sk"),
            GlobalSecondaryIndexes=[
                index(LIST_INDEX, "pk", "updated_key"),
                index(SWEEP_INDEX, "sweep_pk", "sweep_sk"),
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
    _ensure_vector_commit_table(ddb, config.vector_commit_table)
    location = {"LocationConstraint": config.region}
    try:
        if config.region == "us-east-1":  # the one region that refuses a LocationConstraint
            s3.create_bucket(Bucket=config.bucket)
        else:
            s3.create_bucket(Bucket=config.bucket, CreateBucketConfiguration=location)
    except ClientError as exc:
        if error_code(exc) != "BucketAlreadyOwnedByYou":
            raise


def _ensure_vector_commit_table(ddb: Any, name: str) -> None:
    try:
        ddb.create_table(
            TableName=name,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[
                {"AttributeName": "base_uri", "AttributeType": "S"},
                {"AttributeName": "version", "AttributeType": "N"},
            ],
            KeySchema=key_schema("base_uri", "version"),
        )
    except ClientError as exc:
        if error_code(exc) != "ResourceInUseException":
            raise
    ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 120})


def key_schema(hash_key: str, range_key: str) -> list[dict[str, str]]:
    return [{"AttributeName": hash_key, "KeyType": "HASH"}, {"AttributeName": range_key, "KeyType": "RANGE"}]


def tenant_pk(tenant_id: str) -> str:
    return f"TENANT#{tenant_id}"


def record_key(tenant_id: str, conversation_id: str) -> dict[str, str]:
    return {"pk": tenant_pk(tenant_id), "sk": f"CONV#{conversation_id}"}


def turn_prefix(conversation_id: str) -> str:
    return f"CONV#{conversation_id}#TURN#"


def turn_sk(conversation_id: str, version: int) -> str:
    return f"{turn_prefix(conversation_id)}{version:08d}"


def is_turn(sk: str) -> bool:
    return "#TURN#" in sk


def object_prefix(tenant_id: str, conversation_id: str | None = None) -> str:
    """`{tenant}/` or `{tenant}/{conv}/`: the S3 objects of a tenant or of one conversation."""
    if not tenant_id or "/" in tenant_id or "/" in (conversation_id or ""):  # one prefix must never cover another's
        raise InvalidRequestError(f"'{tenant_id[:80]}' is not a valid tenant id.", param="tenant_id")
    return f"{tenant_id}/" if conversation_id is None else f"{tenant_id}/{conversation_id}/"


def body_key(tenant_id: str, conversation_id: str, version: int) -> str:
    return f"{object_prefix(tenant_id, conversation_id)}{version}.json"


def schedule(conversation_id: str, expires_at: datetime | None, deleted_at: datetime | None) -> dict[str, Any]:
    """The retention attributes: ISO deadlines, the sweep index keys and the numeric TTL (None = absent)."""
    at = sweep_time(expires_at, deleted_at)
    return {
        "expires_iso": None if expires_at is None else iso(expires_at),
        "deleted_iso": None if deleted_at is None else iso(deleted_at),
        "sweep_pk": None if at is None else f"SWEEP#{zlib.crc32(conversation_id.encode()) % SWEEP_SHARDS}",
        "sweep_sk": None if at is None else f"{iso(at)}#{conversation_id}",
        TTL_ATTRIBUTE: None if at is None else int((at + TTL_GRACE).timestamp()),
    }


def record_attributes(meta: ConversationMeta, key: str) -> dict[str, Any]:
    """Every attribute of a conversation record but its key and its instructions (None = absent); `key` is its body's
    S3 key. The instructions are written by `set_instructions` alone, so a turn's commit cannot undo a change."""
    updated = iso(meta.updated_at)
    return {
        "tenant_id": meta.tenant_id,
        "conversation_id": meta.id,
        "title": meta.title,
        "created_at": iso(meta.created_at),
        "updated_at": updated,
        "updated_key": None if meta.deleted_at else f"{updated}#{meta.id}",
        "version": meta.version,
        "message_count": meta.message_count,
        "render_version": meta.render_version,
        "current_node": meta.current_node,
        "body_key": key,
        **schedule(meta.id, meta.expires_at, meta.deleted_at),
    }


def meta_from_item(item: dict[str, Any]) -> ConversationMeta:
    return ConversationMeta(
        id=item["conversation_id"],
        tenant_id=item["tenant_id"],
        title=item.get("title"),
        instructions=item.get("instructions"),
        created_at=parse_iso(item["created_at"]),
        updated_at=parse_iso(item["updated_at"]),
        version=int(item["version"]),
        message_count=int(item["message_count"]),
        render_version=int(item["render_version"]),
        current_node=None if item.get("current_node") is None else int(item["current_node"]),
        expires_at=parse_iso(item.get("expires_iso")),
        deleted_at=parse_iso(item.get("deleted_iso")),
    )


def candidate_from_item(item: dict[str, Any]) -> SweepCandidate:
    return SweepCandidate(
        tenant_id=item["tenant_id"],
        conversation_id=item["conversation_id"],
        updated_at=parse_iso(item["updated_at"]),
        expires_at=parse_iso(item.get("expires_iso")),
        deleted_at=parse_iso(item.get("deleted_iso")),
    )


def audit_item(audit: AuditRecord) -> dict[str, Any]:
    """The audit item; its key is derived from the record, so writing the same record twice keeps one."""
    digest = hashlib.sha256(audit.model_dump_json().encode()).hexdigest()[:16]
    at = iso(audit.at)
    item = {"pk": AUDIT_PK, "sk": f"{at}#{digest}", **audit.model_dump(exclude={"at"}), "at": at}
    return {name: value for name, value in item.items() if value is not None}


def audit_from_item(item: dict[str, Any]) -> AuditRecord:
    return AuditRecord(**{**item, "at": parse_iso(item["at"])})


def update_args(changes: dict[str, Any], condition: str, values: dict[str, Any]) -> dict[str, Any]:
    """UpdateItem arguments: SET the changes that have a value, REMOVE the None ones, only if `condition` holds.

    `condition` names attributes as `#name` and values as `:name` (bound from `values`)."""
    sets = ", ".join(f"#{name} = :{name}" for name, value in changes.items() if value is not None)
    removes = ", ".join(f"#{name}" for name, value in changes.items() if value is None)
    bound = {f":{name}": value for name, value in {**changes, **values}.items() if value is not None}
    expression = " ".join(part for part in (sets and f"SET {sets}", removes and f"REMOVE {removes}") if part)
    return {
        "UpdateExpression": expression,
        "ConditionExpression": condition,
        "ExpressionAttributeNames": {f"#{name}": name for name in [*changes, *re.findall(r"#(\w+)", condition)]},
        **({"ExpressionAttributeValues": bound} if bound else {}),
    }


def unchanged(item: dict[str, Any], *names: str) -> tuple[str, dict[str, Any]]:
    """A condition that `names` still hold what `item` had (absent stays absent), and its values."""
    parts = [f"#{n} = :old_{n}" if n in item else f"attribute_not_exists(#{n})" for n in names]
    return " AND ".join(parts), {f"old_{n}": item[n] for n in names if n in item}


def encode_cursor(item: dict[str, Any]) -> str:
    """An opaque cursor after `item` (a `by_updated` index item, whose `updated_key` is the listing position)."""
    return encode_list_cursor(item["updated_key"])


def cursor_start_key(tenant_id: str, cursor: str) -> dict[str, str]:
    """The index position a cursor of this tenant's listing stands for; anything but such a cursor is a 400."""
    position, conversation_id = decode_list_cursor(cursor)
    return {**record_key(tenant_id, conversation_id), "updated_key": position}

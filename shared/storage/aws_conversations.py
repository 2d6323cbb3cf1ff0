"""AWS conversation store: records and turn index in one tenant-partitioned DynamoDB table, message bodies in S3.

Layout (single table, string keys `pk`/`sk`)::

    record  pk=TENANT#{tenant}  sk=CONV#{conv}                  metadata + pointer `body_key`, never content
    turn    pk=TENANT#{tenant}  sk=CONV#{conv}#TURN#{version:08d} created_at, added, message_count
    audit   pk=AUDIT            sk={at}#{digest}                who removed what (deterministic key: rewrites dedupe)
    body    s3://{bucket}/{tenant}/{conv}/{version}.json       full snapshot of the messages at that version

Writes put the body first (If-None-Match: *), then move the pointer in one conditional transaction with the turn
item, so a crash in between leaves an unreferenced object and no visible change.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import boto3
from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.errors import InvalidRequestError
from shared.storage.aws_retry import CLIENT_CONFIG, Retrier, cancel_reasons, error_code
from shared.storage.conversations import (
    AuditRecord,
    Conversation,
    ConversationMeta,
    ConversationNotFoundError,
    ConversationPage,
    StoredMessage,
    StoreUnavailableError,
    SweepCandidate,
    VersionConflictError,
    check_conversation_id,
    sweep_time,
)

logger = logging.getLogger(__name__)

LIST_INDEX = "by_updated"  # pk / updated_key: only live records carry updated_key
SWEEP_INDEX = "by_sweep"  # sweep_pk / sweep_sk: only records with a sweep time carry them
SWEEP_SHARDS = 8  # spreads the sweep index over partitions; the sweep queries each shard
TTL_ATTRIBUTE = "expires_at"
TTL_GRACE = timedelta(days=7)  # DynamoDB's best-effort TTL must never beat the sweep, which deletes bodies and audits
AUDIT_PK = "AUDIT"
ISO_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # fixed width, so strings sort like the times
CURSOR_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z#(conv_[0-9a-f]{32})$")
TAKEN_KEY_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
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
    max_attempts: int = Field(default=4, ge=1)
    retry_budget_s: float = Field(default=3.0, gt=0)
    # An unreferenced body older than this is a crashed writer's and may be replaced. It must exceed the longest
    # put-to-commit time of a live writer (bounded by the client timeouts and the retry budget).
    orphan_reclaim_s: float = Field(default=60.0, ge=0)


class _Body(BaseModel):
    """The S3 object: every message of the conversation at one version."""

    version: int
    message_count: int
    messages: list[StoredMessage]


def _clients(config: AwsStoreConfig) -> tuple[Any, Any]:
    """(DynamoDB client that takes and returns plain Python values, S3 client); both thread-safe."""
    session = boto3.session.Session(region_name=config.region)
    ddb = session.resource("dynamodb", endpoint_url=config.endpoint_url, config=CLIENT_CONFIG).meta.client
    return ddb, session.client("s3", endpoint_url=config.endpoint_url, config=CLIENT_CONFIG)


def ensure_resources(config: AwsStoreConfig) -> None:
    """Create the table (both indexes, TTL on `expires_at`) and the bucket where missing; safe to run again."""
    ddb, s3 = _clients(config)

    def keys(hash_key: str, range_key: str) -> list[dict[str, str]]:
        return [{"AttributeName": hash_key, "KeyType": "HASH"}, {"AttributeName": range_key, "KeyType": "RANGE"}]

    try:
        ddb.create_table(
            TableName=config.table_name,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[
                {"AttributeName": name, "AttributeType": "S"}
                for name in ("pk", "sk", "updated_key", "sweep_pk", "sweep_sk")
            ],
            KeySchema=keys("pk", "sk"),
            GlobalSecondaryIndexes=[
                {
                    "IndexName": LIST_INDEX,
                    "KeySchema": keys("pk", "updated_key"),
                    "Projection": {"ProjectionType": "ALL"},
                },
                {
                    "IndexName": SWEEP_INDEX,
                    "KeySchema": keys("sweep_pk", "sweep_sk"),
                    "Projection": {"ProjectionType": "ALL"},
                },
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
    location = (
        {} if config.region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": config.region}}
    )
    try:
        s3.create_bucket(Bucket=config.bucket, **location)
    except ClientError as exc:
        if error_code(exc) != "BucketAlreadyOwnedByYou":
            raise


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(value: datetime) -> str:
    if value.tzinfo is None:
        raise ValueError("naive datetime: the store takes timezone-aware UTC times")
    return value.astimezone(UTC).strftime(ISO_FORMAT)


def _iso_or_none(value: datetime | None) -> str | None:
    return None if value is None else _iso(value)


def _parse(value: str | None) -> datetime | None:
    return None if value is None else datetime.strptime(value, ISO_FORMAT).replace(tzinfo=UTC)


def _pk(tenant_id: str) -> str:
    return f"TENANT#{tenant_id}"


def _body_key(tenant_id: str, conversation_id: str, version: int) -> str:
    return f"{tenant_id}/{conversation_id}/{version}.json"


def _schedule(conversation_id: str, expires_at: datetime | None, deleted_at: datetime | None) -> dict[str, Any]:
    """The retention attributes: ISO deadlines, the sweep index keys and the numeric TTL (None = absent)."""
    at = sweep_time(expires_at, deleted_at)
    return {
        "expires_iso": _iso_or_none(expires_at),
        "deleted_iso": _iso_or_none(deleted_at),
        "sweep_pk": None if at is None else f"SWEEP#{zlib.crc32(conversation_id.encode()) % SWEEP_SHARDS}",
        "sweep_sk": None if at is None else f"{_iso(at)}#{conversation_id}",
        TTL_ATTRIBUTE: None if at is None else int((at + TTL_GRACE).timestamp()),
    }


def _record(meta: ConversationMeta, body_key: str) -> dict[str, Any]:
    """Every attribute of a conversation record but its key (None = absent)."""
    updated = _iso(meta.updated_at)
    return {
        "tenant_id": meta.tenant_id,
        "conversation_id": meta.id,
        "title": meta.title,
        "created_at": _iso(meta.created_at),
        "updated_at": updated,
        "updated_key": None if meta.deleted_at else f"{updated}#{meta.id}",
        "version": meta.version,
        "message_count": meta.message_count,
        "render_version": meta.render_version,
        "body_key": body_key,
        **_schedule(meta.id, meta.expires_at, meta.deleted_at),
    }


def _meta(item: dict[str, Any]) -> ConversationMeta:
    return ConversationMeta(
        id=item["conversation_id"],
        tenant_id=item["tenant_id"],
        title=item.get("title"),
        created_at=_parse(item["created_at"]),
        updated_at=_parse(item["updated_at"]),
        version=int(item["version"]),
        message_count=int(item["message_count"]),
        render_version=int(item["render_version"]),
        expires_at=_parse(item.get("expires_iso")),
        deleted_at=_parse(item.get("deleted_iso")),
    )


def _update_args(changes: dict[str, Any], condition: str, values: dict[str, Any]) -> dict[str, Any]:
    """UpdateItem arguments: SET the changes that have a value, REMOVE the None ones, only if `condition` holds."""
    sets = ", ".join(f"#{name} = :{name}" for name, value in changes.items() if value is not None)
    removes = ", ".join(f"#{name}" for name, value in changes.items() if value is None)
    bound = {f":{name}": value for name, value in {**changes, **values}.items() if value is not None}
    return {
        "UpdateExpression": " ".join(
            part for part in (sets and f"SET {sets}", removes and f"REMOVE {removes}") if part
        ),
        "ConditionExpression": condition,
        "ExpressionAttributeNames": {f"#{name}": name for name in [*changes, *re.findall(r"#(\w+)", condition)]},
        **({"ExpressionAttributeValues": bound} if bound else {}),
    }


def _unchanged(item: dict[str, Any], *names: str) -> tuple[str, dict[str, Any]]:
    """A condition that `names` still hold what `item` had (absent stays absent), and its values."""
    parts = [f"#{n} = :old_{n}" if n in item else f"attribute_not_exists(#{n})" for n in names]
    return " AND ".join(parts), {f"old_{n}": item[n] for n in names if n in item}


def _encode_cursor(updated_key: str) -> str:
    return base64.urlsafe_b64encode(updated_key.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[str, str]:
    """(updated_key, conversation id) of the last item of the previous page; anything else is a 400."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    if not (match := CURSOR_RE.fullmatch(text)):
        raise InvalidRequestError("Invalid pagination cursor.", param="after")
    return text, match.group(1)


def _audit_item(audit: AuditRecord) -> dict[str, Any]:
    digest = hashlib.sha256(audit.model_dump_json().encode()).hexdigest()[:16]
    at = _iso(audit.at)
    item = {"pk": AUDIT_PK, "sk": f"{at}#{digest}", **audit.model_dump(exclude={"at"}), "at": at}
    return {name: value for name, value in item.items() if value is not None}


class AwsConversationStore:
    """The `ConversationStore` on DynamoDB + S3. Thread-safe (boto3 clients are); every call goes through retries."""

    def __init__(self, config: AwsStoreConfig) -> None:
        self.config = config
        self._ddb, self._s3 = _clients(config)
        self._call = Retrier(config.max_attempts, config.retry_budget_s)
        self._sse: dict[str, str] = (
            {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": config.kms_key_id}
            if config.kms_key_id
            else {"ServerSideEncryption": "AES256"}
        )

    # -- writes ---------------------------------------------------------------------------------------------------

    def append_turn(
        self,
        tenant_id: str,
        conversation_id: str,
        *,
        expected_version: int,
        messages: list[StoredMessage],
        expires_at: datetime | None,
        render_version: int,
        title: str | None = None,
        now: datetime | None = None,
    ) -> ConversationMeta:
        check_conversation_id(conversation_id)
        if expected_version < 0:
            raise InvalidRequestError("expected_version must not be negative.", param="expected_version")
        now = now or _now()
        current = None
        if expected_version > 0:
            current = self._load(tenant_id, conversation_id, now)
            if current is None:
                raise ConversationNotFoundError(conversation_id)
            if current.version != expected_version:
                raise VersionConflictError(conversation_id, expected_version)
            if not current.complete:  # appending would make the loss permanent
                raise StoreUnavailableError("The stored conversation is incomplete; try again shortly.")
        previous = current.messages if current else []
        meta = ConversationMeta(
            id=conversation_id,
            tenant_id=tenant_id,
            title=current.title if current else title,
            created_at=current.created_at if current else now,
            updated_at=now,
            version=expected_version + 1,
            message_count=len(previous) + len(messages),
            render_version=current.render_version if current else render_version,
            expires_at=expires_at,
        )
        body = _Body(version=meta.version, message_count=meta.message_count, messages=[*previous, *messages])
        key = _body_key(tenant_id, conversation_id, meta.version)
        writer = uuid.uuid4().hex
        etag = self._put_body(meta, key, body, writer)
        try:
            self._commit(meta, key, writer, added=len(messages), now=now)
        except (VersionConflictError, ConversationNotFoundError):
            self._discard(key, etag)
            raise
        if current:
            self._discard(_body_key(tenant_id, conversation_id, current.version))
        return meta

    def rename(
        self, tenant_id: str, conversation_id: str, title: str, *, now: datetime | None = None
    ) -> ConversationMeta | None:
        now = now or _now()
        updated = self._update_if(tenant_id, conversation_id, {"title": title}, LIVE, {"now": _iso(now)})
        return None if updated is None else _meta(updated)

    def soft_delete(self, tenant_id: str, conversation_id: str, *, now: datetime | None = None) -> bool:
        now = now or _now()
        while True:  # the sweep time depends on the expiry read: redo if the record changed in between
            item = self._get_item(tenant_id, conversation_id)
            if item is None or not (meta := _meta(item)).visible_at(now):
                return False
            guard, values = _unchanged(item, "version", "expires_iso")
            changes = {"updated_key": None, **_schedule(conversation_id, meta.expires_at, now)}
            if self._update_if(
                tenant_id, conversation_id, changes, f"{LIVE} AND {guard}", {**values, "now": _iso(now)}
            ):
                return True

    def reschedule(self, tenant_id: str, conversation_id: str, expires_at: datetime | None) -> None:
        while True:
            item = self._get_item(tenant_id, conversation_id)
            if item is None:
                return
            guard, values = _unchanged(item, "deleted_iso")
            changes = _schedule(conversation_id, expires_at, _parse(item.get("deleted_iso")))
            if self._update_if(tenant_id, conversation_id, changes, f"attribute_exists(#pk) AND {guard}", values):
                return

    def hard_delete(self, tenant_id: str, conversation_id: str, audit: AuditRecord) -> bool:
        # Objects first, the record last (with its audit, atomically): an interrupted run leaves the record for the
        # next sweep to finish, and the audit exists exactly when the record is gone.
        while True:
            item = self._get_item(tenant_id, conversation_id)
            if item is None:
                return False
            self._delete_prefix(f"{tenant_id}/{conversation_id}/")
            self._delete_keys(self._query_keys(tenant_id, f"CONV#{conversation_id}#TURN#"))
            delete = {
                "TableName": self.config.table_name,
                "Key": {"pk": _pk(tenant_id), "sk": f"CONV#{conversation_id}"},
                "ConditionExpression": "#version = :version",  # a turn landed meanwhile: clean up again
                "ExpressionAttributeNames": {"#version": "version"},
                "ExpressionAttributeValues": {":version": item["version"]},
            }
            put = {"TableName": self.config.table_name, "Item": _audit_item(audit)}
            try:
                self._call(
                    self._ddb.transact_write_items,
                    TransactItems=[{"Delete": delete}, {"Put": put}],
                    ClientRequestToken=uuid.uuid4().hex,
                )
                return True
            except ClientError as exc:
                if "ConditionalCheckFailed" not in cancel_reasons(exc):
                    raise

    def erase_tenant(self, tenant_id: str, audit: AuditRecord) -> int:
        keys = list(self._query_keys(tenant_id, "CONV#"))
        self._delete_prefix(f"{tenant_id}/")
        # Turn items before records, as in hard_delete.
        self._delete_keys(sorted(keys, key=lambda key: "#TURN#" not in key["sk"]))
        self._call(self._ddb.put_item, TableName=self.config.table_name, Item=_audit_item(audit))
        return sum("#TURN#" not in key["sk"] for key in keys)

    # -- reads ----------------------------------------------------------------------------------------------------

    def get(self, tenant_id: str, conversation_id: str, *, now: datetime | None = None) -> Conversation | None:
        return self._load(tenant_id, conversation_id, now or _now())

    def list(
        self, tenant_id: str, *, limit: int = 20, cursor: str | None = None, now: datetime | None = None
    ) -> ConversationPage:
        if limit < 1:
            raise InvalidRequestError("limit must be at least 1.", param="limit")
        query: dict[str, Any] = {
            "TableName": self.config.table_name,
            "IndexName": LIST_INDEX,
            "KeyConditionExpression": "#pk = :pk",
            "FilterExpression": "attribute_not_exists(#expires_iso) OR #expires_iso > :now",  # expiry is read-time
            "ExpressionAttributeNames": {"#pk": "pk", "#expires_iso": "expires_iso"},
            "ExpressionAttributeValues": {":pk": _pk(tenant_id), ":now": _iso(now or _now())},
            "ScanIndexForward": False,
        }
        if cursor is not None:
            updated_key, conversation_id = _decode_cursor(cursor)
            sk = f"CONV#{conversation_id}"
            query["ExclusiveStartKey"] = {"pk": _pk(tenant_id), "sk": sk, "updated_key": updated_key}
        items: list[dict[str, Any]] = []
        while len(items) <= limit:  # one more than asked says whether there is a next page; filtering makes pages short
            page = self._call(self._ddb.query, **query, Limit=limit + 1 - len(items))
            items += page["Items"]
            if "LastEvaluatedKey" not in page:
                break
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        next_cursor = _encode_cursor(items[limit - 1]["updated_key"]) if len(items) > limit else None
        return ConversationPage(items=[_meta(item) for item in items[:limit]], next_cursor=next_cursor)

    def sweep_candidates(self, now: datetime) -> Iterator[SweepCandidate]:
        bound = f"{_iso(now)}$"  # '$' sorts right after the '#' separator: every sweep time <= now is below it
        for shard in range(SWEEP_SHARDS):
            for item in self._query_all(
                IndexName=SWEEP_INDEX,
                KeyConditionExpression="#sweep_pk = :shard AND #sweep_sk < :bound",
                ExpressionAttributeNames={"#sweep_pk": "sweep_pk", "#sweep_sk": "sweep_sk"},
                ExpressionAttributeValues={":shard": f"SWEEP#{shard}", ":bound": bound},
            ):
                yield SweepCandidate(
                    tenant_id=item["tenant_id"],
                    conversation_id=item["conversation_id"],
                    updated_at=_parse(item["updated_at"]),
                    expires_at=_parse(item.get("expires_iso")),
                    deleted_at=_parse(item.get("deleted_iso")),
                )

    def export_tenant(self, tenant_id: str, *, now: datetime | None = None) -> Iterator[Conversation]:
        now = now or _now()
        cursor = None
        while True:
            page = self.list(tenant_id, limit=100, cursor=cursor, now=now)
            for meta in page.items:
                if (conversation := self._load(tenant_id, meta.id, now)) is not None:
                    yield conversation
            if (cursor := page.next_cursor) is None:
                return

    def audit_log(self, *, limit: int = 100) -> list[AuditRecord]:
        items = self._call(
            self._ddb.query,
            TableName=self.config.table_name,
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": "pk"},
            ExpressionAttributeValues={":pk": AUDIT_PK},
            ScanIndexForward=False,
            Limit=max(limit, 1),
        )["Items"]
        return [AuditRecord(**{**item, "at": _parse(item["at"])}) for item in items[:limit]]

    def close(self) -> None:
        self._ddb.close()
        self._s3.close()

    # -- DynamoDB helpers -----------------------------------------------------------------------------------------

    def _get_item(self, tenant_id: str, conversation_id: str) -> dict[str, Any] | None:
        key = {"pk": _pk(tenant_id), "sk": f"CONV#{conversation_id}"}
        return self._call(self._ddb.get_item, TableName=self.config.table_name, Key=key, ConsistentRead=True).get(
            "Item"
        )

    def _update_if(
        self, tenant_id: str, conversation_id: str, changes: dict[str, Any], condition: str, values: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The updated record, or None when `condition` did not hold (a failed condition is never retried)."""
        try:
            return self._call(
                self._ddb.update_item,
                TableName=self.config.table_name,
                Key={"pk": _pk(tenant_id), "sk": f"CONV#{conversation_id}"},
                ReturnValues="ALL_NEW",
                **_update_args(changes, condition, values),
            )["Attributes"]
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return None
            raise

    def _commit(self, meta: ConversationMeta, key: str, writer: str, *, added: int, now: datetime) -> None:
        """Move the pointer to `key` and add the turn item in one transaction, if the record is still as read."""
        table, pk = self.config.table_name, _pk(meta.tenant_id)
        record = _record(meta, key)
        if meta.version == 1:
            item = {"pk": pk, "sk": f"CONV#{meta.id}", **{k: v for k, v in record.items() if v is not None}}
            write = {"Put": {"TableName": table, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}}
        else:
            for unchanged in ("title", "created_at", "render_version", "tenant_id", "conversation_id"):
                del record[unchanged]  # a concurrent rename must survive
            condition = f"#version = :expected AND {LIVE}"
            values = {"expected": meta.version - 1, "now": _iso(now)}
            key_attrs = {"pk": pk, "sk": f"CONV#{meta.id}"}
            write = {"Update": {"TableName": table, "Key": key_attrs, **_update_args(record, condition, values)}}
        turn = {
            "pk": pk,
            "sk": f"CONV#{meta.id}#TURN#{meta.version:08d}",
            "version": meta.version,
            "created_at": _iso(now),
            "added": added,
            "message_count": meta.message_count,
        }
        try:
            self._call(
                self._ddb.transact_write_items,
                TransactItems=[write, {"Put": {"TableName": table, "Item": turn}}],
                ClientRequestToken=writer,  # a retry of a commit that landed succeeds instead of conflicting
            )
        except ClientError as exc:
            if "ConditionalCheckFailed" not in cancel_reasons(exc):
                raise
            if meta.version == 1:
                raise VersionConflictError(meta.id, 0) from None
            current = self._get_item(meta.tenant_id, meta.id)
            if current is None or not _meta(current).visible_at(now):
                raise ConversationNotFoundError(meta.id) from None
            raise VersionConflictError(meta.id, meta.version - 1) from None

    def _query_all(self, **query: Any) -> Iterator[dict[str, Any]]:
        while True:
            page = self._call(self._ddb.query, TableName=self.config.table_name, **query)
            yield from page["Items"]
            if "LastEvaluatedKey" not in page:
                return
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _query_keys(self, tenant_id: str, sk_prefix: str) -> Iterator[dict[str, Any]]:
        return self._query_all(
            KeyConditionExpression="#pk = :pk AND begins_with(#sk, :prefix)",
            ExpressionAttributeNames={"#pk": "pk", "#sk": "sk"},
            ExpressionAttributeValues={":pk": _pk(tenant_id), ":prefix": sk_prefix},
            ProjectionExpression="#pk, #sk",
            ConsistentRead=True,
        )

    def _delete_keys(self, keys: Iterable[dict[str, Any]]) -> None:
        keys = list(keys)
        for start in range(0, len(keys), 25):  # BatchWriteItem takes 25 requests at most
            pending = {self.config.table_name: [{"DeleteRequest": {"Key": key}} for key in keys[start : start + 25]]}
            for attempt in range(self.config.max_attempts):
                pending = self._call(self._ddb.batch_write_item, RequestItems=pending).get("UnprocessedItems") or {}
                if not pending:
                    break
                time.sleep(0.05 * 2**attempt)
            else:
                raise StoreUnavailableError()

    # -- S3 helpers -----------------------------------------------------------------------------------------------

    def _load(self, tenant_id: str, conversation_id: str, now: datetime) -> Conversation | None:
        """The live record with its body; reads the pointer again once if a writer just replaced the body."""
        meta, body = self._read(tenant_id, conversation_id, now)
        if meta is not None and body is None:
            meta, body = self._read(tenant_id, conversation_id, now)
        if meta is None:
            return None
        messages = body.messages if body is not None and body.version == meta.version else []
        return Conversation(**meta.model_dump(), messages=messages)  # fewer messages than counted: complete=False

    def _read(
        self, tenant_id: str, conversation_id: str, now: datetime
    ) -> tuple[ConversationMeta | None, _Body | None]:
        item = self._get_item(tenant_id, conversation_id)
        if item is None or not (meta := _meta(item)).visible_at(now):
            return None, None
        return meta, self._get_body(item["body_key"])

    def _get_body(self, key: str) -> _Body | None:
        def fetch() -> bytes:  # the read is inside the retried call: a connection cut mid-body is retried too
            return self._s3.get_object(Bucket=self.config.bucket, Key=key)["Body"].read()

        try:
            return _Body.model_validate_json(self._call(fetch))
        except ClientError as exc:
            if error_code(exc) != "NoSuchKey":
                raise
        except ValidationError:
            logger.error("conversation body %s is not a valid snapshot", key)
        return None

    def _put_body(self, meta: ConversationMeta, key: str, body: _Body, writer: str) -> str:
        """Write the body where nobody wrote before; returns its ETag. A taken key is another writer's (a conflict)
        unless our own retried put already landed there, or it is an orphan older than `orphan_reclaim_s`."""
        expected = meta.version - 1
        for attempt in range(2):
            try:
                return self._call(
                    self._s3.put_object,
                    Bucket=self.config.bucket,
                    Key=key,
                    Body=body.model_dump_json().encode(),
                    ContentType="application/json",
                    IfNoneMatch="*",
                    Metadata={"writer": writer},
                    **self._sse,
                )["ETag"]
            except ClientError as exc:
                if error_code(exc) not in TAKEN_KEY_CODES:
                    raise
            item = self._get_item(meta.tenant_id, meta.id)
            if (0 if item is None else int(item["version"])) != expected:
                raise VersionConflictError(meta.id, expected)
            holder = self._head(key)
            if holder is None:  # removed meanwhile
                continue
            if holder.get("Metadata", {}).get("writer") == writer:
                return holder["ETag"]
            if attempt or self._age_s(holder) < self.config.orphan_reclaim_s:  # a writer in flight
                raise VersionConflictError(meta.id, expected)
            logger.warning("reclaiming body %s left by a writer that never committed", key)
            self._discard(key, holder["ETag"])
        raise VersionConflictError(meta.id, expected)

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            return self._call(self._s3.head_object, Bucket=self.config.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                return None
            raise

    @staticmethod
    def _age_s(head: dict[str, Any]) -> float:
        """Age of an object by the server's clock (its Date header), so client clock skew cannot matter."""
        date = head.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        server_now = parsedate_to_datetime(date) if date else _now()
        return (server_now - head["LastModified"]).total_seconds()

    def _discard(self, key: str, etag: str | None = None) -> None:
        """Best-effort delete; with `etag`, only that exact object (never a newer writer's)."""
        try:
            self._call(
                self._s3.delete_object, Bucket=self.config.bucket, Key=key, **({"IfMatch": etag} if etag else {})
            )
        except (ClientError, StoreUnavailableError) as exc:
            logger.warning("could not delete %s: %s", key, exc)

    def _delete_prefix(self, prefix: str) -> None:
        listing: dict[str, Any] = {"Bucket": self.config.bucket, "Prefix": prefix}
        while True:
            page = self._call(self._s3.list_objects_v2, **listing)
            objects = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
            if objects:
                result = self._call(
                    self._s3.delete_objects, Bucket=self.config.bucket, Delete={"Objects": objects, "Quiet": True}
                )
                if result.get("Errors"):
                    raise StoreUnavailableError()
            if not page.get("IsTruncated"):
                return
            listing["ContinuationToken"] = page["NextContinuationToken"]

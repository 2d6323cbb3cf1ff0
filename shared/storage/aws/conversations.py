"""DynamoDB + S3 `ConversationStore`: bodies go to S3 first, then one conditional transaction moves the pointer."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from botocore.exceptions import ClientError
from pydantic import ValidationError

from shared.errors import InvalidRequestError
from shared.storage.aws.layout import (
    AUDIT_PK,
    LIST_INDEX,
    LIVE,
    SWEEP_INDEX,
    SWEEP_SHARDS,
    AwsStoreConfig,
    Body,
    audit_from_item,
    audit_item,
    body_key,
    candidate_from_item,
    clients,
    cursor_start_key,
    encode_cursor,
    ensure_resources,
    is_turn,
    iso,
    meta_from_item,
    object_prefix,
    parse_iso,
    record_attributes,
    record_key,
    schedule,
    tenant_pk,
    turn_prefix,
    turn_sk,
    unchanged,
    update_args,
)
from shared.storage.aws.retry import Retrier, cancel_reasons, error_code
from shared.storage.aws.s3_encryption import s3_encryption
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
    anchored,
    check_conversation_id,
    check_keep,
    check_node,
)
from shared.storage.message_tree import ROOT
from shared.storage.timestamps import utc_now

__all__ = ["AwsConversationStore", "AwsStoreConfig", "ensure_resources"]

logger = logging.getLogger(__name__)

TAKEN_KEY_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})  # S3: someone wrote that key


class AwsConversationStore:
    """The `ConversationStore` on DynamoDB + S3. Thread-safe (boto3 clients are); every call goes through retries."""

    def __init__(self, config: AwsStoreConfig) -> None:
        self.config = config
        self._ddb, self._s3 = clients(config)
        self._call = Retrier(config.max_attempts, config.retry_budget_s)
        self._sse = s3_encryption(config.kms_key_id)

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
        loaded: Conversation | None = None,
        keep: int | None = None,
        parent: int | None = None,
    ) -> ConversationMeta:
        check_conversation_id(conversation_id)
        if expected_version < 0:
            raise InvalidRequestError("expected_version must not be negative.", param="expected_version")
        now = now or utc_now()
        current = None
        if expected_version > 0:
            matches = loaded is not None and (loaded.id, loaded.tenant_id) == (conversation_id, tenant_id)
            # The caller's read saves a GetItem + GetObject; a stale one cannot win: the commit checks the version.
            current = loaded if matches else self._load(tenant_id, conversation_id, now)
            if current is None:
                raise ConversationNotFoundError(conversation_id)
            if current.version != expected_version:
                raise VersionConflictError(conversation_id, expected_version)
            if not current.complete:  # appending would make the loss permanent
                raise StoreUnavailableError("The stored conversation is incomplete; try again shortly.")
        previous = current.messages if current else []
        if keep is not None and current is not None:
            previous = previous[: check_keep(keep, len(previous))]
        else:
            active = current.leaf() if current else ROOT
            messages = anchored(messages, active if parent is None else parent, len(previous))
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
            # A turn makes its own branch the active one; a tail rewrite keeps the one read.
            current_node=current.current_node if keep is not None and current else None,
        )
        body = Body(version=meta.version, message_count=meta.message_count, messages=[*previous, *messages])
        key = body_key(tenant_id, conversation_id, meta.version)
        writer = uuid.uuid4().hex
        # Body first: a crash before the commit leaves an unreferenced object (reclaimed later), no dangling pointer.
        etag = self._put_body(meta, key, body, writer)
        try:
            self._commit(meta, key, writer, added=len(messages), now=now)
        except (VersionConflictError, ConversationNotFoundError):
            self._discard(key, etag)
            raise
        if current:
            self._discard(body_key(tenant_id, conversation_id, current.version))
        return meta

    def rename(
        self, tenant_id: str, conversation_id: str, title: str, *, now: datetime | None = None
    ) -> ConversationMeta | None:
        now = now or utc_now()
        updated = self._update_if(tenant_id, conversation_id, {"title": title}, LIVE, {"now": iso(now)})
        return None if updated is None else meta_from_item(updated)

    def set_instructions(
        self, tenant_id: str, conversation_id: str, instructions: str | None, *, now: datetime | None = None
    ) -> ConversationMeta | None:
        # Only here: a turn's commit never writes the attribute (layout.record_attributes), so it cannot undo this.
        now = now or utc_now()
        updated = self._update_if(tenant_id, conversation_id, {"instructions": instructions}, LIVE, {"now": iso(now)})
        return None if updated is None else meta_from_item(updated)

    def set_current_node(
        self, tenant_id: str, conversation_id: str, node: int, *, now: datetime | None = None
    ) -> ConversationMeta | None:
        now = now or utc_now()
        values = {"now": iso(now), "node": node}
        while True:  # a failed condition is told apart (gone, or no such message) by a read
            if node >= 0 and (
                updated := self._update_if(
                    tenant_id, conversation_id, {"current_node": node}, f"{LIVE} AND #message_count > :node", values
                )
            ):
                return meta_from_item(updated)
            item = self._get_item(tenant_id, conversation_id)
            if item is None or not (meta := meta_from_item(item)).visible_at(now):
                return None
            check_node(node, meta.message_count)  # else a turn landed in between: try again

    def soft_delete(self, tenant_id: str, conversation_id: str, *, now: datetime | None = None) -> bool:
        now = now or utc_now()
        while True:  # the sweep time depends on the expiry read: redo if the record changed in between
            item = self._get_item(tenant_id, conversation_id)
            if item is None or not (meta := meta_from_item(item)).visible_at(now):
                return False
            guard, values = unchanged(item, "version", "expires_iso")
            changes = {"updated_key": None, **schedule(conversation_id, meta.expires_at, now)}
            if self._update_if(tenant_id, conversation_id, changes, f"{LIVE} AND {guard}", {**values, "now": iso(now)}):
                return True

    def reschedule(self, tenant_id: str, conversation_id: str, expires_at: datetime | None) -> None:
        while True:
            item = self._get_item(tenant_id, conversation_id)
            if item is None:
                return
            guard, values = unchanged(item, "deleted_iso")
            changes = schedule(conversation_id, expires_at, parse_iso(item.get("deleted_iso")))
            if self._update_if(tenant_id, conversation_id, changes, f"attribute_exists(#pk) AND {guard}", values):
                return

    def is_stored(self, tenant_id: str, conversation_id: str) -> bool:
        return self._get_item(tenant_id, conversation_id) is not None

    def hard_delete(self, tenant_id: str, conversation_id: str, audit: AuditRecord) -> bool:
        # Objects first, the record last (with its audit, atomically): an interrupted run leaves the record for the
        # next sweep to finish, and the audit exists exactly when the record is gone.
        while True:
            item = self._get_item(tenant_id, conversation_id)
            if item is None:
                return False
            self._delete_prefix(object_prefix(tenant_id, conversation_id))
            self._delete_keys(self._query_keys(tenant_id, turn_prefix(conversation_id)))
            delete = {
                "TableName": self.config.table_name,
                "Key": record_key(tenant_id, conversation_id),
                "ConditionExpression": "#version = :version",  # a turn landed meanwhile: clean up again
                "ExpressionAttributeNames": {"#version": "version"},
                "ExpressionAttributeValues": {":version": item["version"]},
            }
            put = {"TableName": self.config.table_name, "Item": audit_item(audit)}
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
        self._delete_prefix(object_prefix(tenant_id))
        self._delete_keys(sorted(keys, key=lambda key: not is_turn(key["sk"])))  # records last, as in hard_delete
        self._call(self._ddb.put_item, TableName=self.config.table_name, Item=audit_item(audit))
        return sum(not is_turn(key["sk"]) for key in keys)

    # -- reads ----------------------------------------------------------------------------------------------------

    def get(self, tenant_id: str, conversation_id: str, *, now: datetime | None = None) -> Conversation | None:
        return self._load(tenant_id, conversation_id, now or utc_now())

    def get_meta(self, tenant_id: str, conversation_id: str, *, now: datetime | None = None) -> ConversationMeta | None:
        item = self._get_item(tenant_id, conversation_id)
        if item is None or not (meta := meta_from_item(item)).visible_at(now or utc_now()):
            return None
        return meta

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
            "ExpressionAttributeValues": {":pk": tenant_pk(tenant_id), ":now": iso(now or utc_now())},
            "ScanIndexForward": False,
        }
        if cursor is not None:
            query["ExclusiveStartKey"] = cursor_start_key(tenant_id, cursor)
        items: list[dict[str, Any]] = []
        while len(items) <= limit:  # one more than asked says whether there is a next page; filtering makes pages short
            page = self._call(self._ddb.query, **query, Limit=limit + 1 - len(items))
            items += page["Items"]
            if "LastEvaluatedKey" not in page:
                break
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        next_cursor = encode_cursor(items[limit - 1]) if len(items) > limit else None
        return ConversationPage(items=[meta_from_item(item) for item in items[:limit]], next_cursor=next_cursor)

    def sweep_candidates(self, now: datetime) -> Iterator[SweepCandidate]:
        bound = f"{iso(now)}$"  # '$' sorts right after the '#' separator: every sweep time <= now is below it
        for shard in range(SWEEP_SHARDS):
            for item in self._query_all(
                IndexName=SWEEP_INDEX,
                KeyConditionExpression="#sweep_pk = :shard AND #sweep_sk < :bound",
                ExpressionAttributeNames={"#sweep_pk": "sweep_pk", "#sweep_sk": "sweep_sk"},
                ExpressionAttributeValues={":shard": f"SWEEP#{shard}", ":bound": bound},
            ):
                yield candidate_from_item(item)

    def export_tenant(self, tenant_id: str, *, now: datetime | None = None) -> Iterator[Conversation]:
        now = now or utc_now()
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
        return [audit_from_item(item) for item in items[:limit]]

    def close(self) -> None:
        self._ddb.close()
        self._s3.close()

    # -- DynamoDB helpers -----------------------------------------------------------------------------------------

    def _get_item(self, tenant_id: str, conversation_id: str) -> dict[str, Any] | None:
        key = record_key(tenant_id, conversation_id)
        item = self._call(self._ddb.get_item, TableName=self.config.table_name, Key=key, ConsistentRead=True)
        return item.get("Item")

    def _update_if(
        self, tenant_id: str, conversation_id: str, changes: dict[str, Any], condition: str, values: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The updated record, or None when `condition` did not hold (a failed condition is never retried)."""
        try:
            return self._call(
                self._ddb.update_item,
                TableName=self.config.table_name,
                Key=record_key(tenant_id, conversation_id),
                ReturnValues="ALL_NEW",
                **update_args(changes, condition, values),
            )["Attributes"]
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return None
            raise

    def _commit(self, meta: ConversationMeta, key: str, writer: str, *, added: int, now: datetime) -> None:
        """Move the pointer to `key` and add the turn item in one transaction, if the record is still as read."""
        table, record = self.config.table_name, record_attributes(meta, key)
        if meta.version == 1:
            item = {**record_key(meta.tenant_id, meta.id), **{k: v for k, v in record.items() if v is not None}}
            write = {"Put": {"TableName": table, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}}
        else:
            for fixed in ("title", "created_at", "render_version", "tenant_id", "conversation_id"):
                del record[fixed]  # set at creation; rewriting them could undo a concurrent rename
            condition = f"#version = :expected AND {LIVE}"
            values = {"expected": meta.version - 1, "now": iso(now)}
            write = {
                "Update": {
                    "TableName": table,
                    "Key": record_key(meta.tenant_id, meta.id),
                    **update_args(record, condition, values),
                }
            }
        turn = {
            "pk": tenant_pk(meta.tenant_id),
            "sk": turn_sk(meta.id, meta.version),
            "version": meta.version,
            "created_at": iso(now),
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
            if current is None or not meta_from_item(current).visible_at(now):
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
            ExpressionAttributeValues={":pk": tenant_pk(tenant_id), ":prefix": sk_prefix},
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

    # -- bodies (S3) -----------------------------------------------------------------------------------------------

    def _load(self, tenant_id: str, conversation_id: str, now: datetime) -> Conversation | None:
        """The live record with its body; reads the pointer again once if a writer just replaced the body."""
        meta, body = self._read(tenant_id, conversation_id, now)
        if meta is not None and body is None:
            meta, body = self._read(tenant_id, conversation_id, now)
        if meta is None:
            return None
        messages = body.messages if body is not None and body.version == meta.version else []
        return Conversation(**meta.model_dump(), messages=messages)  # fewer messages than counted: complete=False

    def _read(self, tenant_id: str, conversation_id: str, now: datetime) -> tuple[ConversationMeta | None, Body | None]:
        item = self._get_item(tenant_id, conversation_id)
        if item is None or not (meta := meta_from_item(item)).visible_at(now):
            return None, None
        return meta, self._get_body(item["body_key"])

    def _get_body(self, key: str) -> Body | None:
        def fetch() -> bytes:  # the read is inside the retried call: a connection cut mid-body is retried too
            return self._s3.get_object(Bucket=self.config.bucket, Key=key)["Body"].read()

        try:
            return Body.model_validate_json(self._call(fetch))
        except ClientError as exc:
            if error_code(exc) != "NoSuchKey":
                raise
        except ValidationError:
            logger.error("conversation body %s is not a valid snapshot", key)
        return None

    def _put_body(self, meta: ConversationMeta, key: str, body: Body, writer: str) -> str:
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
        server_now = parsedate_to_datetime(date) if date else utc_now()
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

"""DynamoDB `FileStore`: file, vector store and attachment items in the conversations table, under their own keys.

Items (no index attributes, so they stay out of the conversation indexes):

    pk = files#<tenant>   sk = file#<id>              a file's metadata
                          sk = usage                  the tenant's file count and bytes (the quota's counter)
                          sk = vs#<id>                a vector store
                          sk = vsf#<store>#<file>     an attachment
    pk = files-pending    sk = <tenant>#<store>#<file>   an in_progress attachment (resumed after a restart)
    pk = files-tenants    sk = <tenant>               tenants holding files or stores (the retention sweep's walk)

Adding a file is one transaction: the file item and the usage counter, conditioned on the counter staying within the
quota, so racing uploads cannot both take the last slot.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from shared.settings import Settings
from shared.storage.aws.paging import query_pages
from shared.storage.aws.retry import Retrier, cancel_reasons
from shared.storage.files import Attachment, AttachmentState, FileQuota, QuotaExceeded, StoredFile, StoredVectorStore
from shared.storage.timestamps import from_iso, optional_from_iso, to_iso

PENDING_PK = "files-pending"
TENANTS_PK = "files-tenants"


def aws_clients(settings: Settings) -> tuple[Any, Any]:
    """(DynamoDB client on plain Python values, S3 client) for the conversations table and bucket."""
    from shared.storage.aws.layout import AwsStoreConfig, clients

    config = AwsStoreConfig(
        table_name=settings.conversations_table,
        bucket=settings.conversations_bucket,
        region=settings.aws_region,
        endpoint_url=settings.aws_endpoint_url,
        kms_key_id=settings.conversations_kms_key_id,
    )
    return clients(config)


def _pk(tenant_id: str) -> str:
    return f"files#{tenant_id}"


def _values(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in ("pk", "sk")}


def _file(item: dict[str, Any]) -> StoredFile:
    values = _values(item)
    values.update(
        bytes=int(values["bytes"]),
        created_at=from_iso(values["created_at"]),
        expires_at=optional_from_iso(values.get("expires_at")),
    )
    return StoredFile(**values)


def _store(item: dict[str, Any]) -> StoredVectorStore:
    values = _values(item)
    days = values.get("expires_after_days")
    return StoredVectorStore(
        **{
            **values,
            "created_at": from_iso(values["created_at"]),
            "last_active_at": from_iso(values["last_active_at"]),
            "metadata": json.loads(values["metadata"]),
            "expires_after_days": None if days is None else int(days),
        }
    )


def _attachment(item: dict[str, Any]) -> Attachment:
    values = _values(item)
    values.update(
        created_at=from_iso(values["created_at"]),
        attributes=json.loads(values["attributes"]),
        usage_bytes=int(values["usage_bytes"]),
        chunks=int(values["chunks"]),
    )
    return Attachment(**values)


def _attachment_item(a: Attachment) -> dict[str, Any]:
    item = a.model_dump(exclude_none=True)
    item.update(
        pk=_pk(a.tenant_id),
        sk=f"vsf#{a.vector_store_id}#{a.file_id}",
        created_at=to_iso(a.created_at),
        attributes=json.dumps(a.attributes),
    )
    return item


class AwsFileStore:
    """Thread-safe (the boto3 client is); every call goes through the store's retries."""

    def __init__(self, ddb: Any, table: str, *, max_attempts: int = 4, retry_budget_s: float = 3.0) -> None:
        self._ddb = ddb
        self._table = table
        self._call = Retrier(max_attempts, retry_budget_s)

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        answer = self._call(self._ddb.get_item, TableName=self._table, Key={"pk": pk, "sk": sk}, ConsistentRead=True)
        return answer.get("Item")

    def _query(self, pk: str, prefix: str) -> Iterator[dict[str, Any]]:
        return query_pages(self._call, self._ddb, self._table, pk, prefix)

    def _put(self, item: dict[str, Any]) -> None:
        self._call(self._ddb.put_item, TableName=self._table, Item=item)

    def _delete(self, pk: str, sk: str) -> bool:
        answer = self._call(
            self._ddb.delete_item, TableName=self._table, Key={"pk": pk, "sk": sk}, ReturnValues="ALL_OLD"
        )
        return "Attributes" in answer

    def _note_tenant(self, tenant_id: str) -> None:
        self._put({"pk": TENANTS_PK, "sk": tenant_id})

    # -- files ----------------------------------------------------------------------------------------------------

    def add_file(self, record: StoredFile, quota: FileQuota) -> None:
        item = record.model_dump(exclude_none=True)
        item.update(pk=_pk(record.tenant_id), sk=f"file#{record.id}", created_at=to_iso(record.created_at))
        if record.expires_at is not None:
            item["expires_at"] = to_iso(record.expires_at)
        usage = {
            "Update": {
                "TableName": self._table,
                "Key": {"pk": _pk(record.tenant_id), "sk": "usage"},
                "UpdateExpression": "ADD files :one, #bytes :size",
                "ConditionExpression": "attribute_not_exists(files) OR (files < :max_files AND #bytes <= :room)",
                "ExpressionAttributeNames": {"#bytes": "bytes"},
                "ExpressionAttributeValues": {
                    ":one": 1,
                    ":size": record.bytes,
                    ":max_files": quota.max_files,
                    ":room": quota.max_total_bytes - record.bytes,
                },
            }
        }
        if quota.max_files < 1:
            raise QuotaExceeded("files", quota.max_files)
        if record.bytes > quota.max_total_bytes:
            raise QuotaExceeded("bytes", quota.max_total_bytes)
        put = {"Put": {"TableName": self._table, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}}
        try:
            self._call(self._ddb.transact_write_items, TransactItems=[usage, put])
        except ClientError as exc:
            if "ConditionalCheckFailed" in cancel_reasons(exc)[:1]:
                files, _ = self.usage(record.tenant_id)
                if files >= quota.max_files:
                    raise QuotaExceeded("files", quota.max_files) from exc
                raise QuotaExceeded("bytes", quota.max_total_bytes) from exc
            raise
        self._note_tenant(record.tenant_id)

    def get_file(self, tenant_id: str, file_id: str) -> StoredFile | None:
        item = self._get(_pk(tenant_id), f"file#{file_id}")
        return None if item is None else _file(item)

    def list_files(
        self, tenant_id: str, *, purpose: str | None, after: str | None, limit: int, newest_first: bool
    ) -> list[StoredFile]:
        files = [_file(item) for item in self._query(_pk(tenant_id), "file#")]
        files = [f for f in files if purpose is None or f.purpose == purpose]
        files.sort(key=lambda f: (f.created_at, f.id), reverse=newest_first)
        if after is not None:
            ids = [f.id for f in files]
            files = files[ids.index(after) + 1 :] if after in ids else []
        return files[:limit]

    def delete_file(self, tenant_id: str, file_id: str) -> bool:
        for attachment in self.attachments_of_file(tenant_id, file_id):
            self.detach(tenant_id, attachment.vector_store_id, file_id)
        answer = self._call(
            self._ddb.delete_item,
            TableName=self._table,
            Key={"pk": _pk(tenant_id), "sk": f"file#{file_id}"},
            ReturnValues="ALL_OLD",
        )
        old = answer.get("Attributes")
        if old is None:
            return False
        self._call(
            self._ddb.update_item,
            TableName=self._table,
            Key={"pk": _pk(tenant_id), "sk": "usage"},
            UpdateExpression="ADD files :minus, #bytes :size",
            ExpressionAttributeNames={"#bytes": "bytes"},
            ExpressionAttributeValues={":minus": -1, ":size": -int(old["bytes"])},
        )
        return True

    def usage(self, tenant_id: str) -> tuple[int, int]:
        item = self._get(_pk(tenant_id), "usage") or {}
        return int(item.get("files", 0)), int(item.get("bytes", 0))

    # -- vector stores --------------------------------------------------------------------------------------------

    def create_vector_store(self, record: StoredVectorStore) -> None:
        item = record.model_dump(exclude_none=True)
        item.update(
            pk=_pk(record.tenant_id),
            sk=f"vs#{record.id}",
            created_at=to_iso(record.created_at),
            last_active_at=to_iso(record.last_active_at),
            metadata=json.dumps(record.metadata),
        )
        self._put(item)
        self._note_tenant(record.tenant_id)

    def get_vector_store(self, tenant_id: str, store_id: str) -> StoredVectorStore | None:
        item = self._get(_pk(tenant_id), f"vs#{store_id}")
        return None if item is None else _store(item)

    def list_vector_stores(
        self, tenant_id: str, *, after: str | None, limit: int, newest_first: bool
    ) -> list[StoredVectorStore]:
        stores = sorted(
            (_store(item) for item in self._query(_pk(tenant_id), "vs#")),
            key=lambda s: (s.created_at, s.id),
            reverse=newest_first,
        )
        if after is not None:
            ids = [s.id for s in stores]
            stores = stores[ids.index(after) + 1 :] if after in ids else []
        return stores[:limit]

    def touch_vector_store(self, tenant_id: str, store_id: str, at: datetime) -> None:
        try:
            self._call(
                self._ddb.update_item,
                TableName=self._table,
                Key={"pk": _pk(tenant_id), "sk": f"vs#{store_id}"},
                UpdateExpression="SET last_active_at = :at",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeValues={":at": to_iso(at)},
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise

    def delete_vector_store(self, tenant_id: str, store_id: str) -> bool:
        for attachment in self.list_attachments(tenant_id, store_id):
            self.detach(tenant_id, store_id, attachment.file_id)
        return self._delete(_pk(tenant_id), f"vs#{store_id}")

    # -- attachments ----------------------------------------------------------------------------------------------

    def attach(self, attachment: Attachment) -> Attachment:
        item = _attachment_item(attachment)
        try:
            self._call(
                self._ddb.put_item, TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)"
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            found = self.get_attachment(attachment.tenant_id, attachment.vector_store_id, attachment.file_id)
            if found is not None:
                return found
        if attachment.status == "in_progress":
            pending = f"{attachment.tenant_id}#{attachment.vector_store_id}#{attachment.file_id}"
            self._put({"pk": PENDING_PK, "sk": pending})
        return attachment

    def get_attachment(self, tenant_id: str, store_id: str, file_id: str) -> Attachment | None:
        item = self._get(_pk(tenant_id), f"vsf#{store_id}#{file_id}")
        return None if item is None else _attachment(item)

    def list_attachments(self, tenant_id: str, store_id: str) -> list[Attachment]:
        found = [_attachment(item) for item in self._query(_pk(tenant_id), f"vsf#{store_id}#")]
        return sorted(found, key=lambda a: (a.created_at, a.file_id))

    def attachment_states(self, tenant_id: str, store_id: str) -> dict[str, AttachmentState]:
        prefix = f"vsf#{store_id}#"
        return {
            str(item["sk"])[len(prefix) :]: AttachmentState(str(item["status"]), json.loads(item["attributes"]))
            for item in self._query(_pk(tenant_id), prefix)
        }

    def attachments_of_file(self, tenant_id: str, file_id: str) -> list[Attachment]:
        return [a for a in map(_attachment, self._query(_pk(tenant_id), "vsf#")) if a.file_id == file_id]

    def finish(self, attachment: Attachment) -> bool:
        a = attachment
        try:
            self._call(
                self._ddb.update_item,
                TableName=self._table,
                Key={"pk": _pk(a.tenant_id), "sk": f"vsf#{a.vector_store_id}#{a.file_id}"},
                UpdateExpression="SET #status = :status, error_code = :code, error_message = :message,"
                " usage_bytes = :usage, chunks = :chunks",
                ConditionExpression="#status = :in_progress",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={
                    ":status": a.status,
                    ":code": a.error_code,
                    ":message": a.error_message,
                    ":usage": a.usage_bytes,
                    ":chunks": a.chunks,
                    ":in_progress": "in_progress",
                },
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return False
        finally:
            self._delete(PENDING_PK, f"{a.tenant_id}#{a.vector_store_id}#{a.file_id}")
        return True

    def detach(self, tenant_id: str, store_id: str, file_id: str) -> bool:
        self._delete(PENDING_PK, f"{tenant_id}#{store_id}#{file_id}")
        return self._delete(_pk(tenant_id), f"vsf#{store_id}#{file_id}")

    def pending(self) -> Iterator[Attachment]:
        for item in list(self._query(PENDING_PK, "")):
            tenant_id, store_id, file_id = item["sk"].split("#", 2)
            found = self.get_attachment(tenant_id, store_id, file_id)
            if found is not None and found.status == "in_progress":
                yield found

    def claim(self, tenant_id: str, store_id: str, file_id: str, owner: str, until: datetime, now: datetime) -> bool:
        try:
            self._call(
                self._ddb.update_item,
                TableName=self._table,
                Key={"pk": _pk(tenant_id), "sk": f"vsf#{store_id}#{file_id}"},
                UpdateExpression="SET claim_owner = :owner, claim_until = :until",
                # ISO timestamps of one fixed width compare as text the way the instants compare in time.
                ConditionExpression="#status = :in_progress AND (attribute_not_exists(claim_until)"
                " OR claim_until < :now OR claim_owner = :owner)",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={
                    ":owner": owner,
                    ":until": to_iso(until),
                    ":now": to_iso(now),
                    ":in_progress": "in_progress",
                },
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def tenants(self) -> list[str]:
        return sorted(item["sk"] for item in self._query(TENANTS_PK, ""))

    def close(self) -> None:
        """Nothing to release (the boto3 client is shared)."""

"""DynamoDB `BatchStore`: batch and line items in the conversations table, large line results in the S3 bucket.

Items (no index attributes, so they stay out of the conversation indexes):

    pk = batches#<tenant>   sk = batch#<id>              the batch: `record` (JSON of what `advance` writes), `version`
                                                         (optimistic lock of `record`), `status`, the lease
                                                         (`claim_owner`, `claim_until`) and the counts, which only
                                                         `record_line` changes (ADD)
                            sk = line#<id>#<line:07d>    a line's result (JSON), or `s3_key` where it is too large
    pk = batches-active     sk = <tenant>#<id>           a batch that is not final (the runner's walk)

`record_line` is one transaction: the line item (only if absent) and the counts. `advance` is one transaction: the
record (conditioned on its version, its status and, for a runner, the lease) and, when the status is final, the
removal of the active marker.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from shared.storage.aws.paging import query_pages
from shared.storage.aws.retry import Retrier, cancel_reasons
from shared.storage.aws.s3_encryption import s3_encryption
from shared.storage.batches import BatchUpdate, LineResult, StoredBatch
from shared.storage.timestamps import optional_from_iso, to_iso
from shared.wire.batches_api import FINAL_STATUSES

ACTIVE_PK = "batches-active"
INLINE_LIMIT = 350_000  # bytes of a line result kept in its item (DynamoDB's item limit is 400 KB)
_COUNTS = ("total", "completed", "failed", "input_tokens", "cached_tokens", "output_tokens")
_OUTSIDE_RECORD = {"claim_owner", "claim_until", *_COUNTS[1:]}


def _pk(tenant_id: str) -> str:
    return f"batches#{tenant_id}"


def _line_sk(batch_id: str, line: int) -> str:
    return f"line#{batch_id}#{line:07d}"


def _batch(item: dict[str, Any]) -> StoredBatch:
    values = json.loads(item["record"])
    values.update({name: int(item.get(name, 0)) for name in _COUNTS[1:]})
    values.update(claim_owner=item.get("claim_owner"), claim_until=optional_from_iso(item.get("claim_until")))
    return StoredBatch.model_validate(values)


def _record(batch: StoredBatch) -> str:
    return batch.model_dump_json(exclude=_OUTSIDE_RECORD)


class AwsBatchStore:
    """Thread-safe (the boto3 clients are); every call goes through the store's retries."""

    def __init__(
        self, ddb: Any, table: str, s3: Any, bucket: str, *, kms_key_id: str | None = None,
        max_attempts: int = 4, retry_budget_s: float = 3.0,
    ) -> None:  # fmt: skip
        self._ddb = ddb
        self._table = table
        self._s3 = s3
        self._bucket = bucket
        self._sse = s3_encryption(kms_key_id)
        self._call = Retrier(max_attempts, retry_budget_s)

    def _get(self, tenant_id: str, batch_id: str) -> dict[str, Any] | None:
        answer = self._call(
            self._ddb.get_item, TableName=self._table, Key={"pk": _pk(tenant_id), "sk": f"batch#{batch_id}"},
            ConsistentRead=True,
        )  # fmt: skip
        return answer.get("Item")

    def _query(self, pk: str, prefix: str) -> Iterator[dict[str, Any]]:
        return query_pages(self._call, self._ddb, self._table, pk, prefix)

    def _transact(self, items: list[dict[str, Any]]) -> bool:
        """False when a condition failed (nothing was written)."""
        try:
            self._call(self._ddb.transact_write_items, TransactItems=items)
        except ClientError as exc:
            if "ConditionalCheckFailed" in cancel_reasons(exc):
                return False
            raise
        return True

    def create(self, batch: StoredBatch) -> None:
        item = {
            "pk": _pk(batch.tenant_id), "sk": f"batch#{batch.id}", "record": _record(batch), "version": 0,
            "status": batch.status, "created_at": to_iso(batch.created_at),
            **{name: getattr(batch, name) for name in _COUNTS[1:]},
        }  # fmt: skip
        marker = {"pk": ACTIVE_PK, "sk": f"{batch.tenant_id}#{batch.id}"}
        put = {"TableName": self._table, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}
        self._transact([{"Put": put}, {"Put": {"TableName": self._table, "Item": marker}}])

    def get(self, tenant_id: str, batch_id: str) -> StoredBatch | None:
        item = self._get(tenant_id, batch_id)
        return None if item is None else _batch(item)

    def list(self, tenant_id: str, *, after: str | None, limit: int) -> list[StoredBatch]:
        batches = [_batch(item) for item in self._query(_pk(tenant_id), "batch#")]
        batches.sort(key=lambda b: (b.created_at, b.id), reverse=True)
        if after is not None:
            ids = [b.id for b in batches]
            batches = batches[ids.index(after) + 1 :] if after in ids else []
        return batches[:limit]

    def active(self) -> Iterator[StoredBatch]:
        for marker in list(self._query(ACTIVE_PK, "")):
            tenant_id, _, batch_id = marker["sk"].partition("#")
            batch = self.get(tenant_id, batch_id)
            if batch is not None and batch.status not in FINAL_STATUSES:
                yield batch

    def claim(self, tenant_id: str, batch_id: str, owner: str, until: datetime, now: datetime) -> bool:
        finals = {f":final{i}": status for i, status in enumerate(sorted(FINAL_STATUSES))}
        try:
            self._call(
                self._ddb.update_item,
                TableName=self._table,
                Key={"pk": _pk(tenant_id), "sk": f"batch#{batch_id}"},
                UpdateExpression="SET claim_owner = :owner, claim_until = :until",
                # ISO timestamps of one fixed width compare as text the way the instants compare in time.
                ConditionExpression=f"attribute_exists(pk) AND NOT #status IN ({', '.join(finals)})"
                " AND (attribute_not_exists(claim_until) OR claim_until < :now OR claim_owner = :owner)",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={":owner": owner, ":until": to_iso(until), ":now": to_iso(now), **finals},
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def advance(
        self, tenant_id: str, batch_id: str, update: BatchUpdate, *, from_statuses: frozenset[str], owner: str | None
    ) -> StoredBatch | None:
        item = self._get(tenant_id, batch_id)
        if item is None:
            return None
        batch = _batch(item)
        if batch.status not in from_statuses or (owner is not None and batch.claim_owner != owner):
            return None
        written = update.applied_to(batch)
        condition = "version = :version AND #status = :status"
        values: dict[str, Any] = {
            ":version": int(item["version"]), ":status": batch.status, ":record": _record(written), ":one": 1,
            ":new_status": written.status,
        }  # fmt: skip
        if owner is not None:
            condition += " AND claim_owner = :owner"
            values[":owner"] = owner
        writes: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self._table,
                    "Key": {"pk": _pk(tenant_id), "sk": f"batch#{batch_id}"},
                    "UpdateExpression": "SET #record = :record, #status = :new_status ADD version :one",
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": {"#record": "record", "#status": "status"},
                    "ExpressionAttributeValues": values,
                }
            }
        ]
        if written.status in FINAL_STATUSES:
            key = {"pk": ACTIVE_PK, "sk": f"{tenant_id}#{batch_id}"}
            writes.append({"Delete": {"TableName": self._table, "Key": key}})
        return written if self._transact(writes) else None

    def record_line(self, result: LineResult) -> bool:
        text = result.model_dump_json()
        line: dict[str, Any] = {"pk": _pk(result.tenant_id), "sk": _line_sk(result.batch_id, result.line)}
        if len(text.encode()) > INLINE_LIMIT:
            key = f"batches/{result.tenant_id}/{result.batch_id}/{result.line:07d}.json"
            self._call(self._s3.put_object, Bucket=self._bucket, Key=key, Body=text.encode(), **self._sse)
            line["s3_key"] = key
        else:
            line["record"] = text
        counts = {
            ":completed": 1 if result.ok else 0, ":failed": 0 if result.ok else 1, ":input": result.input_tokens,
            ":cached": result.cached_tokens, ":output": result.output_tokens,
        }  # fmt: skip
        return self._transact(
            [
                {
                    "Put": {
                        "TableName": self._table, "Item": line, "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": {"pk": _pk(result.tenant_id), "sk": f"batch#{result.batch_id}"},
                        "UpdateExpression": "ADD completed :completed, failed :failed, input_tokens :input,"
                        " cached_tokens :cached, output_tokens :output",
                        "ConditionExpression": "attribute_exists(pk)",
                        "ExpressionAttributeValues": counts,
                    }
                },
            ]
        )  # fmt: skip

    def _line(self, item: dict[str, Any]) -> LineResult:
        if "record" in item:
            return LineResult.model_validate_json(item["record"])
        body = self._call(self._s3.get_object, Bucket=self._bucket, Key=item["s3_key"])["Body"].read()
        return LineResult.model_validate_json(body)

    def lines(self, tenant_id: str, batch_id: str) -> Iterator[LineResult]:
        for item in self._query(_pk(tenant_id), f"line#{batch_id}#"):
            yield self._line(item)

    def done_lines(self, tenant_id: str, batch_id: str) -> set[int]:
        return {int(item["sk"].rsplit("#", 1)[1]) for item in self._query(_pk(tenant_id), f"line#{batch_id}#")}

    def delete_tenant(self, tenant_id: str) -> int:
        batches = 0
        for item in list(self._query(_pk(tenant_id), "")):
            self._call(self._ddb.delete_item, TableName=self._table, Key={"pk": item["pk"], "sk": item["sk"]})
            if item["sk"].startswith("batch#"):
                batches += 1
                key = {"pk": ACTIVE_PK, "sk": f"{tenant_id}#{item['sk'].removeprefix('batch#')}"}
                self._call(self._ddb.delete_item, TableName=self._table, Key=key)
        pages = self._s3.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=f"batches/{tenant_id}/")
        for page in pages:
            keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
            if keys:
                self._s3.delete_objects(Bucket=self._bucket, Delete={"Objects": keys})
        return batches

    def close(self) -> None:
        return None

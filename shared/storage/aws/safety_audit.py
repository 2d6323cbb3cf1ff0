"""DynamoDB safety audit store on the accounts table: records per tenant by time, a guard per (request, layer), and
expiry entries that let the sweep read only what is due (the layout is drawn in aws_accounts_layout.py)."""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Callable, Iterator
from datetime import datetime
from decimal import Decimal
from itertools import islice
from typing import Any

from shared.storage.aws.accounts_layout import AccountsTable, AwsAccountsConfig, compact
from shared.storage.aws.layout import TTL_ATTRIBUTE, TTL_GRACE
from shared.storage.safety_audit import SafetyAuditRecord
from shared.storage.timestamps import from_iso, optional_from_iso, to_iso

__all__ = ["AwsAccountsConfig", "AwsSafetyAudit"]

EXPIRY_SHARDS = 8  # spreads one day's expiring writes over 8 partitions; the sweep merges them
_PAGE = 500  # items per Query page (list_for_tenant asks for no more than its limit)


# -- keys ---------------------------------------------------------------------------------------------------------


def record_pk(tenant_id: str) -> str:
    return f"SAFETY#{tenant_id}"


def record_key(record: SafetyAuditRecord) -> dict[str, str]:
    return {"pk": record_pk(record.tenant_id), "sk": f"{to_iso(record.at)}#{record.request_id}#{record.layer.value}"}


def guard_key(request_id: str, layer: str) -> dict[str, str]:
    return {"pk": f"SAFETYREQ#{request_id}", "sk": layer}


def expiry_key(record: SafetyAuditRecord, expires_at: datetime) -> dict[str, str]:
    shard = zlib.crc32(record.request_id.encode()) % EXPIRY_SHARDS
    at = to_iso(expires_at)
    return {"pk": f"SAFETYEXP#{shard}", "sk": f"{at}#{record.tenant_id}#{record.request_id}#{record.layer.value}"}


def due_bound(now: datetime) -> str:
    """The upper bound (exclusive) of the expiry entries due at `now`: `{now}#…` sorts before `{now}$`."""
    return f"{to_iso(now)}$"


# -- codecs -------------------------------------------------------------------------------------------------------


def audit_items(record: SafetyAuditRecord) -> list[dict[str, Any]]:
    """The guard, the record and (when it expires) its expiry entry; each carries the TTL backstop."""
    key = record_key(record)
    expires = record.expires_at
    ttl = None if expires is None else int((expires + TTL_GRACE).timestamp())
    fields = record.model_dump(mode="json", exclude={"at", "expires_at", "score"})
    item = {
        **key,
        **fields,
        "score": Decimal(repr(record.score)),  # DynamoDB numbers are decimals; repr round-trips the float exactly
        "at": to_iso(record.at),
        "expires_iso": None if expires is None else to_iso(expires),
        TTL_ATTRIBUTE: ttl,
    }
    pointer = {"tenant_id": record.tenant_id, "record_sk": key["sk"], TTL_ATTRIBUTE: ttl}
    items = [{**guard_key(record.request_id, record.layer.value), **pointer}, item]
    if expires is not None:
        ids = {"request_id": record.request_id, "layer": record.layer.value}
        items.append({**expiry_key(record, expires), **pointer, **ids})
    return [compact(i) for i in items]


def audit_from_item(item: dict[str, Any]) -> SafetyAuditRecord:
    return SafetyAuditRecord(
        request_id=item["request_id"],
        tenant_id=item["tenant_id"],
        key_id=item.get("key_id"),
        at=from_iso(item["at"]),
        layer=item["layer"],
        detector=item["detector"],
        category=item["category"],
        score=float(item["score"]),
        policy_version=item["policy_version"],
        action=item["action"],
        model=item["model"],
        content=item.get("content"),
        expires_at=optional_from_iso(item.get("expires_iso")),
    )


def entry_keys(entry: dict[str, Any]) -> list[dict[str, str]]:
    """The keys of the record, the guard and the expiry entry that an expiry entry stands for."""
    return [
        {"pk": record_pk(entry["tenant_id"]), "sk": entry["record_sk"]},
        guard_key(entry["request_id"], entry["layer"]),
        {"pk": entry["pk"], "sk": entry["sk"]},
    ]


class AwsSafetyAudit(AccountsTable):
    """The `SafetyAuditStore` on the accounts table. `record` is one transaction (guard, record, expiry entry); the
    sweep deletes a due record with its guard and entry in one transaction, so an interrupted run leaves the entry
    and the next run finishes it."""

    def record(self, record: SafetyAuditRecord) -> bool:
        items = audit_items(SafetyAuditRecord.model_validate(record.model_dump()))  # raises before any write
        return self._transact([{"Put": self._put_new(item)} for item in items])

    def list_for_tenant(
        self, tenant_id: str, start: datetime, end: datetime, *, limit: int = 100
    ) -> list[SafetyAuditRecord]:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        bounds = {":start": to_iso(start), ":end": to_iso(end)}
        if start >= end:  # an empty range (DynamoDB refuses BETWEEN with the bounds reversed)
            return []
        items = self._query(
            KeyConditionExpression="#pk = :pk AND #sk BETWEEN :start AND :end",  # `{end}#…` sorts after `{end}`
            ExpressionAttributeNames={"#pk": "pk", "#sk": "sk"},
            ExpressionAttributeValues={":pk": record_pk(tenant_id), **bounds},
            ScanIndexForward=False,
            Limit=min(limit, _PAGE),
            ConsistentRead=True,
        )
        return [audit_from_item(item) for item in islice(items, limit)]

    def sweep(self, now: datetime, is_held: Callable[[str], bool], *, limit: int = 1000) -> int:
        """Also takes the TTL off the due items of held tenants, so that DynamoDB's backstop never deletes what a
        legal hold keeps (once the hold ends, the sweep deletes them)."""
        deleted = 0
        for entry in self._due(now):
            if deleted >= limit:
                break
            if is_held(entry["tenant_id"]):
                self._keep(entry)
            elif self._delete(entry):
                deleted += 1
        return deleted

    def count_due(self, now: datetime, is_held: Callable[[str], bool], *, limit: int = 1000) -> int:
        due = 0
        for entry in self._due(now):
            if due >= limit:
                break
            due += not is_held(entry["tenant_id"])
        return due

    def _due(self, now: datetime) -> Iterator[dict[str, Any]]:
        """The expiry entries due at `now`, soonest first: every shard read lazily, page by page, and merged."""
        shards = [
            self._query(
                KeyConditionExpression="#pk = :pk AND #sk < :bound",
                ExpressionAttributeNames={"#pk": "pk", "#sk": "sk"},
                ExpressionAttributeValues={":pk": f"SAFETYEXP#{shard}", ":bound": due_bound(now)},
                Limit=_PAGE,
                ConsistentRead=True,
            )
            for shard in range(EXPIRY_SHARDS)
        ]
        return heapq.merge(*shards, key=lambda entry: entry["sk"])

    def _delete(self, entry: dict[str, Any]) -> bool:
        record, guard, own = entry_keys(entry)
        table = self.config.table_name
        deleted = self._transact(
            [
                {"Delete": {"TableName": table, "Key": record, "ConditionExpression": "attribute_exists(pk)"}},
                {"Delete": {"TableName": table, "Key": guard}},
                {"Delete": {"TableName": table, "Key": own}},
            ]
        )
        if not deleted:  # the record is gone already (another sweep, the TTL backstop): drop what pointed at it
            self._transact([{"Delete": {"TableName": table, "Key": key}} for key in (guard, own)])
        return deleted

    def _keep(self, entry: dict[str, Any]) -> None:
        if TTL_ATTRIBUTE not in entry:  # kept already
            return
        table = self.config.table_name
        self._transact(  # a condition fails only when the record went meanwhile: nothing left to keep
            [
                {
                    "Update": {
                        "TableName": table,
                        "Key": key,
                        "UpdateExpression": "REMOVE #ttl",
                        "ConditionExpression": "attribute_exists(pk)",
                        "ExpressionAttributeNames": {"#ttl": TTL_ATTRIBUTE},
                    }
                }
                for key in entry_keys(entry)
            ]
        )

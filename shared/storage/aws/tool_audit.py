"""DynamoDB audit of server-side tool runs on the accounts table: one item per run under the tenant's partition,
sorted by time (`TOOLRUN#{tenant}` / `{at}#{run_id}`); a conditional put makes a retried record a no-op."""

from __future__ import annotations

from datetime import datetime
from itertools import islice
from typing import Any

from shared.storage.aws.accounts_layout import AccountsTable, AwsAccountsConfig, compact
from shared.storage.timestamps import from_iso, to_iso
from shared.storage.tool_audit import ToolRunRecord

__all__ = ["AwsAccountsConfig", "AwsToolAudit"]

_PAGE = 500


def record_pk(tenant_id: str) -> str:
    return f"TOOLRUN#{tenant_id}"


def run_item(record: ToolRunRecord) -> dict[str, Any]:
    key = {"pk": record_pk(record.tenant_id), "sk": f"{to_iso(record.at)}#{record.run_id}"}
    return compact({**key, **record.model_dump(mode="json"), "at": to_iso(record.at)})


def run_from_item(item: dict[str, Any]) -> ToolRunRecord:
    fields = {name: item.get(name) for name in ToolRunRecord.model_fields}
    exit_code = item.get("exit_code")  # DynamoDB numbers come back as Decimal
    numbers = {"duration_ms": int(item["duration_ms"]), "exit_code": None if exit_code is None else int(exit_code)}
    return ToolRunRecord(
        **{**fields, **numbers, "at": from_iso(item["at"]), "limits_hit": item.get("limits_hit") or []}
    )


class AwsToolAudit(AccountsTable):
    def record(self, record: ToolRunRecord) -> bool:
        item = run_item(ToolRunRecord.model_validate(record.model_dump()))  # raises before any write
        return self._transact([{"Put": self._put_new(item)}])

    def list_for_tenant(
        self, tenant_id: str, start: datetime, end: datetime, *, limit: int = 100
    ) -> list[ToolRunRecord]:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        if start >= end:
            return []
        items = self._query(
            # `{at}#{run}` sorts after `{at}`: the upper bound `{end}` excludes records at exactly `end`.
            KeyConditionExpression="#pk = :pk AND #sk BETWEEN :start AND :end",
            ExpressionAttributeNames={"#pk": "pk", "#sk": "sk"},
            ExpressionAttributeValues={":pk": record_pk(tenant_id), ":start": to_iso(start), ":end": to_iso(end)},
            ScanIndexForward=False,
            Limit=min(limit, _PAGE),
            ConsistentRead=True,
        )
        return [run_from_item(item) for item in islice(items, limit)]

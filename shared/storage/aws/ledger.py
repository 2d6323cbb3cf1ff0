"""DynamoDB token ledger and meter-export state: entries guarded by request id, the meter outbox, the cursor."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from typing import Any

from shared.storage.aws.accounts_layout import (
    CURSOR_SK,
    LEDGER_INDEX,
    LEDGER_SHARDS,
    METER_PK,
    AccountsTable,
    AwsAccountsConfig,
    hour_pk,
    identifier_key,
    ints,
    ledger_item,
    ledger_pk,
    request_guard_key,
    send_from_item,
    send_item,
    send_sk,
)
from shared.storage.ledger import (
    EMBEDDING_MODEL_PREFIX,
    RERANK_MODEL_PREFIX,
    LedgerEntry,
    MeterSend,
    TenantTotals,
    UsageRow,
)
from shared.storage.timestamps import from_iso, to_iso

__all__ = ["AwsAccountsConfig", "AwsLedger", "AwsMeterState"]

_TOKENS = ("prompt_tokens", "completion_tokens", "cached_tokens")
_HOUR = timedelta(hours=1)


def _hours(start: datetime, end: datetime) -> list[datetime]:
    """The UTC hours that overlap [start, end)."""
    hour = start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    hours = []
    while hour < end:
        hours.append(hour)
        hour += _HOUR
    return hours


def _sum(rows: dict[Any, dict[str, int]], group: Any, item: dict[str, Any]) -> None:
    totals = rows[group]
    totals["requests"] += 1
    for name, value in ints(item, *_TOKENS).items():
        totals[name] += value


def _sums() -> dict[Any, dict[str, int]]:
    return defaultdict(lambda: dict.fromkeys(("requests", *_TOKENS), 0))


def _sum_totals(rows: dict[Any, dict[str, int]], item: dict[str, Any]) -> None:
    """A tenant's totals: an embedding entry's tokens go to `embedding_tokens` only (its own meter), a re-rank entry's
    to `rerank_tokens` only, and a batch
    entry's to the `batch_` counts only (the batch meters)."""
    totals = rows[item["tenant_id"]]
    totals["requests"] += 1
    prefix = "batch_" if item.get("price_class") == "batch" else ""
    tokens = ints(item, *_TOKENS)
    model = str(item.get("model", ""))
    if model.startswith(EMBEDDING_MODEL_PREFIX):
        totals[f"{prefix}embedding_tokens"] += tokens["prompt_tokens"]
        return
    if model.startswith(RERANK_MODEL_PREFIX):
        totals[f"{prefix}rerank_tokens"] += tokens["prompt_tokens"]
        return
    for name, value in tokens.items():
        totals[f"{prefix}{name}"] += value


def _totals_sums() -> dict[Any, dict[str, int]]:
    names = (*_TOKENS, "embedding_tokens", "rerank_tokens")
    return defaultdict(lambda: dict.fromkeys(("requests", *names, *(f"batch_{n}" for n in names)), 0))


class AwsLedger(AccountsTable):
    """The `LedgerStore` on the accounts table. An entry lives in its tenant's partition, ordered by time; a guard
    item per request id makes `record` idempotent; the `ledger_by_hour` index serves totals over all tenants."""

    def record(self, entry: LedgerEntry) -> bool:
        guard = {
            **request_guard_key(entry.request_id),
            "tenant_id": entry.tenant_id,
            "created_at": to_iso(entry.created_at),
        }
        return self._transact([{"Put": self._put_new(guard)}, {"Put": self._put_new(ledger_item(entry))}])

    def usage(self, tenant_id: str, start: datetime, end: datetime) -> list[UsageRow]:
        if start >= end:  # an empty range (DynamoDB refuses BETWEEN with the bounds reversed)
            return []
        rows = _sums()
        for item in self._query(
            KeyConditionExpression="#pk = :pk AND #sk BETWEEN :start AND :end",  # `{end}#…` sorts after `{end}`
            ExpressionAttributeNames={"#pk": "pk", "#sk": "sk", "#model": "model", "#class": "price_class"},
            ExpressionAttributeValues={":pk": ledger_pk(tenant_id), ":start": to_iso(start), ":end": to_iso(end)},
            ProjectionExpression=f"#sk, #model, #class, {', '.join(_TOKENS)}",
            ConsistentRead=True,
        ):
            price_class = item.get("price_class", "standard")  # entries written before batches have none
            _sum(rows, (date.fromisoformat(item["sk"][:10]), item["model"], price_class), item)
        return [
            UsageRow(day=day, model=model, price_class=price_class, **sums)
            for (day, model, price_class), sums in sorted(rows.items())
        ]

    def totals(self, start: datetime, end: datetime) -> list[TenantTotals]:
        # Each shard of each hour in range, on the index (eventually consistent: the exporter's grace period after a
        # window closes covers its lag); never a Scan.
        if start >= end:
            return []
        rows = _totals_sums()
        bounds = {":start": to_iso(start), ":end": to_iso(end)}
        for hour in _hours(start, end):
            for shard in range(LEDGER_SHARDS):
                for item in self._query(
                    IndexName=LEDGER_INDEX,
                    KeyConditionExpression="#hour_pk = :hour AND #sk BETWEEN :start AND :end",
                    ExpressionAttributeNames={"#hour_pk": "hour_pk", "#sk": "sk"},
                    ExpressionAttributeValues={":hour": hour_pk(hour, shard), **bounds},
                ):
                    _sum_totals(rows, item)
        return [TenantTotals(tenant_id=tenant, **sums) for tenant, sums in sorted(rows.items())]


class AwsMeterState(AccountsTable):
    """The `MeterStateStore` on the accounts table, all in the `METER` partition (one exporter writes it): the send
    records in window order, a copy of each pending one, an identifier guard per send, and the cursor."""

    def add_pending(self, send: MeterSend) -> bool:
        pending = send.model_copy(update={"sent_at": None})
        guard = {**identifier_key(send.identifier), "window_start": to_iso(send.window_start)}
        return self._transact(
            [
                {"Put": self._put_new(guard)},
                {"Put": self._put_new(send_item("SEND", pending))},
                {"Put": self._put_new(send_item("PENDING", pending))},
            ]
        )

    def mark_sent(self, identifier: str, at: datetime) -> None:
        guard = self._get(identifier_key(identifier))
        if guard is None:
            return
        window_start, table = from_iso(guard["window_start"]), self.config.table_name
        self._transact(
            [
                {
                    "Update": {
                        "TableName": table,
                        "Key": {"pk": METER_PK, "sk": send_sk("SEND", window_start, identifier)},
                        "UpdateExpression": "SET #sent_at = if_not_exists(#sent_at, :at)",  # the first confirmation
                        "ConditionExpression": "attribute_exists(#pk)",  # never a stray item of its own
                        "ExpressionAttributeNames": {"#sent_at": "sent_at", "#pk": "pk"},
                        "ExpressionAttributeValues": {":at": to_iso(at)},
                    }
                },
                {
                    "Delete": {
                        "TableName": table,
                        "Key": {"pk": METER_PK, "sk": send_sk("PENDING", window_start, identifier)},
                    }
                },
            ]
        )

    def pending(self) -> list[MeterSend]:
        return [send_from_item(item) for item in self._query_partition(METER_PK, "PENDING#")]

    def sends(self, start: datetime, end: datetime) -> list[MeterSend]:
        if start >= end:
            return []
        items = self._query(
            KeyConditionExpression="#pk = :pk AND #sk BETWEEN :start AND :end",  # `SEND#{end}#…` sorts after the end
            ExpressionAttributeNames={"#pk": "pk", "#sk": "sk"},
            ExpressionAttributeValues={
                ":pk": METER_PK,
                ":start": f"SEND#{to_iso(start)}",
                ":end": f"SEND#{to_iso(end)}",
            },
            ConsistentRead=True,
        )
        return [send_from_item(item) for item in items]

    def get_cursor(self) -> datetime | None:
        item = self._get({"pk": METER_PK, "sk": CURSOR_SK})
        return None if item is None else from_iso(item["window_end"])

    def set_cursor(self, window_end: datetime) -> None:
        item = {"pk": METER_PK, "sk": CURSOR_SK, "window_end": to_iso(window_end)}
        self._write(self._ddb.put_item, TableName=self.config.table_name, Item=item)

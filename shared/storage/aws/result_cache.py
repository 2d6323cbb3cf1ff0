"""DynamoDB result cache on the accounts table: one item per (tenant, request key), expired by DynamoDB's TTL.

    cached answer  pk=RCACHE#{tenant}  sk={key}   the answer; `expires_at` (epoch seconds) is the table's TTL attribute

DynamoDB deletes expired items lazily (up to days late; moto never does), so a read also compares `expires_at` with
its clock and ignores an expired item: the TTL bounds storage, the read bounds what is served. One GetItem per lookup,
one PutItem per stored answer; no size bound of our own (DynamoDB's TTL is the eviction). The account erase queries
the tenant's partition (keys only) and deletes each item."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from shared.storage.aws.accounts_layout import AccountsTable, AwsAccountsConfig, integer
from shared.storage.aws.layout import TTL_ATTRIBUTE
from shared.storage.result_cache import CachedAnswer
from shared.storage.timestamps import from_iso, to_iso

__all__ = ["AwsAccountsConfig", "AwsResultCache"]


def cache_key(tenant_id: str, key: str) -> dict[str, str]:
    return {"pk": f"RCACHE#{tenant_id}", "sk": key}


def answer_item(answer: CachedAnswer) -> dict[str, Any]:
    fields = answer.model_dump(mode="json", exclude={"created_at", "expires_at"})
    return {
        **cache_key(answer.tenant_id, answer.key),
        **fields,
        "created_iso": to_iso(answer.created_at),
        "expires_iso": to_iso(answer.expires_at),
        # Rounded up: DynamoDB may delete an item only once it has expired by our own reckoning.
        TTL_ATTRIBUTE: math.ceil(answer.expires_at.timestamp()),
    }


def answer_from_item(item: dict[str, Any]) -> CachedAnswer:
    return CachedAnswer(
        tenant_id=item["tenant_id"],
        key=item["key"],
        pool=item["pool"],
        model_version=item["model_version"],
        content=item["content"],
        finish_reason=item["finish_reason"],
        prompt_tokens=integer(item["prompt_tokens"]) or 0,
        completion_tokens=integer(item["completion_tokens"]) or 0,
        created_at=from_iso(item["created_iso"]),
        expires_at=from_iso(item["expires_iso"]),
    )


class AwsResultCache(AccountsTable):
    storage_name = "The result cache"

    def get(self, tenant_id: str, key: str, now: datetime) -> CachedAnswer | None:
        item = self._get(cache_key(tenant_id, key))
        if item is None:
            return None
        answer = answer_from_item(item)
        return answer if answer.expires_at > now.astimezone(UTC) else None

    def put(self, answer: CachedAnswer) -> None:
        answer = CachedAnswer.model_validate(answer.model_dump())
        self._write(self._ddb.put_item, TableName=self.config.table_name, Item=answer_item(answer))

    def forget_tenant(self, tenant_id: str) -> int:
        pk = cache_key(tenant_id, "")["pk"]
        keys = [{"pk": item["pk"], "sk": item["sk"]} for item in self._query_partition_keys(pk)]
        for key in keys:
            self._write(self._ddb.delete_item, TableName=self.config.table_name, Key=key)
        return len(keys)

    def _query_partition_keys(self, pk: str) -> Iterator[dict[str, Any]]:
        return self._query(
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": "pk", "#sk": "sk"},
            ExpressionAttributeValues={":pk": pk},
            ProjectionExpression="#pk, #sk",
            ConsistentRead=True,
        )

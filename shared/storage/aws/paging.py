"""Reading every page of a DynamoDB query through the store's retries (the plain-values client the file and batch
stores use)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


def query_pages(call: Callable[..., Any], ddb: Any, table: str, pk: str, prefix: str = "") -> Iterator[dict[str, Any]]:
    """The items of partition `pk` whose sort key starts with `prefix` (all of them without one), page after page,
    strongly consistent; `call` is the store's retrying caller."""
    args: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)" if prefix else "pk = :pk",
        "ExpressionAttributeValues": {":pk": pk, ":prefix": prefix} if prefix else {":pk": pk},
        "ConsistentRead": True,
    }
    while True:
        answer = call(ddb.query, **args)
        yield from answer.get("Items", [])
        if "LastEvaluatedKey" not in answer:
            return
        args["ExclusiveStartKey"] = answer["LastEvaluatedKey"]

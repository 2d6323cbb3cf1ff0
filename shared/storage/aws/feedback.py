"""DynamoDB feedback store on the conversations table, beside the conversations it rates.

Layout (string keys `pk`/`sk`, the conversation table's; its adapter reads only `CONV#` sort keys and `AUDIT`):
  record     pk=TENANT#{tenant}  sk=FEEDBACK#{conv}#{index:06d}   rating, comment, answer digest, model, policies
  directory  pk=FEEDBACK         sk=TENANT#{tenant}               a tenant with feedback (exports across tenants)
Access patterns (none scans): put = PutItem directory entry, then PutItem record with ALL_OLD (the replaced one);
get = GetItem; list_conversation / list_tenant / delete_conversation / erase_tenant = Query the tenant's partition
by `FEEDBACK#{conv}#` / `FEEDBACK#` (then DeleteItem each); tenants = Query the directory. Every read is consistent.
No TTL: a record goes with its conversation (the retention sweep) or with the account (erase).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from shared.storage.aws.accounts_layout import AccountsTable, AwsAccountsConfig, compact
from shared.storage.aws.layout import tenant_pk
from shared.storage.feedback import INDEX_DIGITS, FeedbackRecord

__all__ = ["AwsAccountsConfig", "AwsFeedback"]

DIRECTORY_PK = "FEEDBACK"


def record_prefix(conversation_id: str | None = None) -> str:
    return "FEEDBACK#" if conversation_id is None else f"FEEDBACK#{conversation_id}#"


def record_key(tenant_id: str, conversation_id: str, message_index: int) -> dict[str, str]:
    return {"pk": tenant_pk(tenant_id), "sk": f"{record_prefix(conversation_id)}{message_index:0{INDEX_DIGITS}d}"}


def directory_key(tenant_id: str) -> dict[str, str]:
    return {"pk": DIRECTORY_PK, "sk": f"TENANT#{tenant_id}"}


def feedback_item(record: FeedbackRecord) -> dict[str, Any]:
    """The item (validating the record first: a bad one raises before any write)."""
    key = record_key(record.tenant_id, record.conversation_id, record.message_index)
    return compact({**key, **record.stored_fields()})


def feedback_from_item(item: dict[str, Any]) -> FeedbackRecord:
    return FeedbackRecord.from_stored({**item, "message_index": int(item["message_index"])})  # numbers: Decimal


class AwsFeedback(AccountsTable):
    """The `FeedbackStore` on the conversations table (`config.table_name`); retried like the account adapters."""

    storage_name = "Conversation storage"

    def put(self, record: FeedbackRecord) -> FeedbackRecord | None:
        item = feedback_item(record)  # raises before any write
        table = self.config.table_name
        # The directory entry first: a record is never there without it (an export across tenants finds it).
        self._write(self._ddb.put_item, TableName=table, Item={**directory_key(record.tenant_id)})
        old = self._write(self._ddb.put_item, TableName=table, Item=item, ReturnValues="ALL_OLD").get("Attributes")
        return None if not old else feedback_from_item(old)

    def get(self, tenant_id: str, conversation_id: str, message_index: int) -> FeedbackRecord | None:
        item = self._get(record_key(tenant_id, conversation_id, message_index))
        return None if item is None else feedback_from_item(item)

    def list_conversation(self, tenant_id: str, conversation_id: str) -> list[FeedbackRecord]:
        items = self._query_partition(tenant_pk(tenant_id), record_prefix(conversation_id))
        return [feedback_from_item(item) for item in items]

    def list_tenant(self, tenant_id: str) -> Iterator[FeedbackRecord]:
        return (feedback_from_item(item) for item in self._query_partition(tenant_pk(tenant_id), record_prefix()))

    def tenants(self) -> list[str]:
        return [item["sk"].removeprefix("TENANT#") for item in self._query_partition(DIRECTORY_PK, "TENANT#")]

    def delete(self, tenant_id: str, conversation_id: str, message_index: int) -> bool:
        return self._delete(record_key(tenant_id, conversation_id, message_index))

    def delete_conversation(self, tenant_id: str, conversation_id: str) -> int:
        return self._delete_all(tenant_pk(tenant_id), record_prefix(conversation_id))

    def erase_tenant(self, tenant_id: str) -> int:
        erased = self._delete_all(tenant_pk(tenant_id), record_prefix())
        self._delete(directory_key(tenant_id))
        return erased

    def _delete_all(self, pk: str, prefix: str) -> int:
        keys = [{"pk": item["pk"], "sk": item["sk"]} for item in self._query_partition(pk, prefix)]
        return sum(self._delete(key) for key in keys)

    def _delete(self, key: dict[str, str]) -> bool:
        table = self.config.table_name
        old = self._write(self._ddb.delete_item, TableName=table, Key=key, ReturnValues="ALL_OLD").get("Attributes")
        return bool(old)

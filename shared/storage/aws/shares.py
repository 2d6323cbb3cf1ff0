"""DynamoDB share-link store on the conversations table, beside the conversations it copies.

Layout (string keys `pk`/`sk`, the conversation table's; its adapter reads only `CONV#` sort keys and `AUDIT`):
  share      pk=SHARE#{token hash}  sk=SHARE                           the snapshot (messages as JSON text), owner
  listing    pk=TENANT#{tenant}     sk=SHARE#{conv}#{created}#{share}   the token hash: the owner's way to it
Both are written and deleted in one transaction. A snapshot is at most MAX_SNAPSHOT_BYTES (shared/storage/shares.py;
DynamoDB's item limit is 400 KB): the service refuses a longer one before anything is written. No TTL: an expired
share stays until revoked or its conversation or account goes (the read refuses it once expired).
"""

from __future__ import annotations

import json
from typing import Any

from shared.storage.aws.accounts_layout import AccountsTable, AwsAccountsConfig, compact
from shared.storage.aws.layout import tenant_pk
from shared.storage.shares import Share, SharedMessage
from shared.storage.timestamps import from_iso, to_iso

__all__ = ["AwsAccountsConfig", "AwsShares"]


def share_key(token_digest: str) -> dict[str, str]:
    return {"pk": f"SHARE#{token_digest}", "sk": "SHARE"}


def listing_prefix(conversation_id: str | None = None) -> str:
    return "SHARE#" if conversation_id is None else f"SHARE#{conversation_id}#"


def listing_key(share: Share) -> dict[str, str]:
    return {
        "pk": tenant_pk(share.tenant_id),
        "sk": f"{listing_prefix(share.conversation_id)}{to_iso(share.created_at)}#{share.id}",
    }


def share_from_item(item: dict[str, Any]) -> Share:
    return Share(
        id=item["share_id"],
        tenant_id=item["tenant_id"],
        conversation_id=item["conversation_id"],
        title=item.get("title"),
        messages=[SharedMessage.model_validate(m) for m in json.loads(item["messages"])],
        created_at=from_iso(item["created_at"]),
        expires_at=from_iso(item["expires_at"]),
    )


class AwsShares(AccountsTable):
    """The `ShareStore` on the conversations table (`config.table_name`); retried like the account adapters."""

    storage_name = "Conversation storage"

    def create(self, share: Share, token_digest: str) -> None:
        messages = json.dumps([m.model_dump(mode="json") for m in share.messages], ensure_ascii=False)
        owner = {"share_id": share.id, "tenant_id": share.tenant_id, "conversation_id": share.conversation_id}
        item = compact(
            {**share_key(token_digest), **owner, "title": share.title, "messages": messages,
             "created_at": to_iso(share.created_at), "expires_at": to_iso(share.expires_at)}
        )  # fmt: skip
        listing = {**listing_key(share), **owner, "token_hash": token_digest}
        if not self._transact([{"Put": self._put_new(item)}, {"Put": self._put_new(listing)}]):
            raise RuntimeError(f"share {share.id} collided")  # a random 192-bit token: never in practice

    def by_token(self, token_digest: str) -> Share | None:
        item = self._get(share_key(token_digest))
        return None if item is None else share_from_item(item)

    def list_conversation(self, tenant_id: str, conversation_id: str) -> list[Share]:
        listed = self._query_partition(tenant_pk(tenant_id), listing_prefix(conversation_id))
        shares = (self.by_token(item["token_hash"]) for item in listed)
        return [share for share in shares if share is not None]

    def revoke(self, tenant_id: str, share_id: str) -> bool:
        found = [i for i in self._query_partition(tenant_pk(tenant_id), listing_prefix()) if i["share_id"] == share_id]
        return sum(self._remove(item) for item in found) > 0

    def delete_conversation(self, tenant_id: str, conversation_id: str) -> int:
        return sum(
            self._remove(item) for item in self._query_partition(tenant_pk(tenant_id), listing_prefix(conversation_id))
        )

    def erase_tenant(self, tenant_id: str) -> int:
        return sum(self._remove(item) for item in self._query_partition(tenant_pk(tenant_id), listing_prefix()))

    def _remove(self, listing: dict[str, Any]) -> bool:
        """Delete the share and its listing entry together (already gone: False)."""
        table = self.config.table_name
        deletes = [
            {"Delete": {"TableName": table, "Key": share_key(listing["token_hash"])}},
            {"Delete": {"TableName": table, "Key": {"pk": listing["pk"], "sk": listing["sk"]}}},
        ]
        return self._transact(deletes)

"""DynamoDB `TenantStore`: tenants, users, hashed API keys and admin keys; multi-item writes are one transaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from shared.fleet.tiers import SafetyOverrides, Tier
from shared.storage.accounts import AdminKeyRecord, ApiKeyRecord, Tenant, TenantChanges, TenantPurpose, User
from shared.storage.aws.accounts_layout import (
    TENANTS_PK,
    AccountsTable,
    AwsAccountsConfig,
    admin_key_from_item,
    admin_key_item,
    admin_key_key,
    api_key_from_item,
    api_key_item,
    api_key_key,
    condition_failed,
    directory_key,
    email_key,
    hash_pointer_key,
    id_pointer_key,
    tenant_attribute,
    tenant_from_item,
    tenant_item,
    tenant_key,
    user_from_item,
    user_item,
    user_key,
)
from shared.storage.aws.layout import update_args
from shared.storage.memory import Memory
from shared.storage.timestamps import to_iso, utc_now

__all__ = ["AwsAccountsConfig", "AwsTenantStore"]


class AwsTenantStore(AccountsTable):
    """The `TenantStore` on the accounts table. Every read is consistent: a revocation or a tenant change is seen by
    the very next authentication on any replica."""

    # -- tenants --------------------------------------------------------------------------------------------------

    def create_tenant(
        self,
        name: str,
        tier: Tier,
        *,
        safety: SafetyOverrides | None = None,
        purpose: TenantPurpose = TenantPurpose.CUSTOMER,
    ) -> Tenant:
        tenant = Tenant.new(name, tier, safety, purpose)
        pointer = {**directory_key(tenant), "tenant_id": tenant.id}
        if not self._transact([{"Put": self._put_new(tenant_item(tenant))}, {"Put": self._put_new(pointer)}]):
            raise RuntimeError(f"tenant id {tenant.id} collided")  # a random 128-bit id: never in practice
        return tenant

    def get_tenant(self, tenant_id: str) -> Tenant | None:
        item = self._get(tenant_key(tenant_id))
        return None if item is None else tenant_from_item(item)

    def list_tenants(self) -> list[Tenant]:
        # The directory partition is in creation order; the records are read consistently in batches.
        keys = [tenant_key(item["tenant_id"]) for item in self._query_partition(TENANTS_PK)]
        found = self._batch_get(keys)
        return [tenant_from_item(found[(key["pk"], key["sk"])]) for key in keys if (key["pk"], key["sk"]) in found]

    def update_tenant(self, tenant_id: str, changes: TenantChanges) -> Tenant | None:
        fields = {name: tenant_attribute(name, value) for name, value in changes.changed().items()}
        if not fields:
            return self.get_tenant(tenant_id)
        try:
            item = self._write(
                self._ddb.update_item,
                TableName=self.config.table_name,
                Key=tenant_key(tenant_id),
                ReturnValues="ALL_NEW",
                **update_args(fields, "attribute_exists(#pk)", {}),
            )["Attributes"]
        except ClientError as exc:
            if condition_failed(exc):
                return None
            raise
        return tenant_from_item(item)

    def update_memory(self, tenant_id: str, change: Callable[[Memory], Memory]) -> Tenant | None:
        while True:  # compare-and-set on the attribute as read: a concurrent change is applied again on top
            item = self._get(tenant_key(tenant_id))
            if item is None:
                return None
            old = item.get("memory")
            new = change(Memory() if old is None else Memory.model_validate_json(old)).model_dump_json()
            guard = "#memory = :old" if old is not None else "attribute_not_exists(#memory)"
            try:
                written = self._write(
                    self._ddb.update_item,
                    TableName=self.config.table_name,
                    Key=tenant_key(tenant_id),
                    ReturnValues="ALL_NEW",
                    **update_args({"memory": new}, f"attribute_exists(#pk) AND {guard}", {"old": old}),
                )["Attributes"]
            except ClientError as exc:
                if condition_failed(exc):
                    continue
                raise
            return tenant_from_item(written)

    # -- users ----------------------------------------------------------------------------------------------------

    def create_user(self, tenant_id: str, email: str, name: str | None) -> User:
        user = User.new(tenant_id, email, name)
        guard = {**email_key(tenant_id, email), "user_id": user.id}
        written = self._transact(
            [
                {"ConditionCheck": self._exists(tenant_key(tenant_id))},
                {"Put": self._put_new(user_item(user))},
                {"Put": self._put_new(guard)},
            ]
        )
        if not written:
            raise ValueError(f"no tenant {tenant_id}, or it already has a user {email!r}")
        return user

    def list_users(self, tenant_id: str) -> list[User]:
        users = [user_from_item(item) for item in self._query_partition(tenant_key(tenant_id)["pk"], "USER#")]
        return sorted(users, key=lambda user: (user.created_at, user.id))

    # -- API keys -------------------------------------------------------------------------------------------------

    def add_api_key(
        self, tenant_id: str, key_hash: str, label: str, *, user_id: str | None = None, hint: str = ""
    ) -> ApiKeyRecord:
        record = ApiKeyRecord.new(tenant_id, key_hash, label, user_id, hint)
        pointer = {"tenant_id": tenant_id, "key_id": record.id}
        writes: list[dict[str, Any]] = [
            {"ConditionCheck": self._exists(tenant_key(tenant_id))},
            {"Put": self._put_new(api_key_item(record))},
            {"Put": self._put_new({**hash_pointer_key(key_hash), **pointer})},
            {"Put": self._put_new({**id_pointer_key(record.id), **pointer})},
        ]
        if user_id is not None:  # the owner must be a user of this tenant
            writes.append({"ConditionCheck": self._exists(user_key(tenant_id, user_id))})
        if not self._transact(writes):
            raise ValueError("no such tenant or user, or a key with this hash exists")
        return record

    def list_keys(self, tenant_id: str) -> list[ApiKeyRecord]:
        keys = [api_key_from_item(item) for item in self._query_partition(tenant_key(tenant_id)["pk"], "KEY#")]
        return sorted(keys, key=lambda key: (key.created_at, key.id))

    def revoke_key(self, key_id: str, *, tenant_id: str | None = None) -> ApiKeyRecord | None:
        if tenant_id is None:
            pointer = self._get(id_pointer_key(key_id))
            if pointer is None:
                return None
            tenant_id = pointer["tenant_id"]
        try:
            item = self._write(
                self._ddb.update_item,
                TableName=self.config.table_name,
                Key=api_key_key(tenant_id, key_id),
                UpdateExpression="SET #revoked_at = if_not_exists(#revoked_at, :now)",  # the first revocation stays
                ConditionExpression="attribute_exists(#pk)",
                ExpressionAttributeNames={"#revoked_at": "revoked_at", "#pk": "pk"},
                ExpressionAttributeValues={":now": to_iso(utc_now())},
                ReturnValues="ALL_NEW",
            )["Attributes"]
        except ClientError as exc:
            if condition_failed(exc):
                return None
            raise
        return api_key_from_item(item)

    def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        pointer = self._get(hash_pointer_key(key_hash))
        if pointer is None:
            return None
        item = self._get(api_key_key(pointer["tenant_id"], pointer["key_id"]))
        return None if item is None else api_key_from_item(item)

    def find_key_with_tenant(self, key_hash: str) -> tuple[ApiKeyRecord, Tenant] | None:
        # Two consistent round trips: the hash's pointer, then the key record and its tenant in one BatchGetItem.
        pointer = self._get(hash_pointer_key(key_hash))
        if pointer is None:
            return None
        key, tenant = api_key_key(pointer["tenant_id"], pointer["key_id"]), tenant_key(pointer["tenant_id"])
        found = self._batch_get([key, tenant])
        record, owner = found.get((key["pk"], key["sk"])), found.get((tenant["pk"], tenant["sk"]))
        if record is None or owner is None:
            return None
        return api_key_from_item(record), tenant_from_item(owner)

    # -- admin keys -----------------------------------------------------------------------------------------------

    def add_admin_key(self, key_hash: str, label: str) -> AdminKeyRecord:
        record = AdminKeyRecord.new(key_hash, label)
        if not self._transact([{"Put": self._put_new(admin_key_item(record))}]):  # a transaction for its token
            raise ValueError("an admin key with this hash exists")
        return record

    def find_admin_key(self, key_hash: str) -> AdminKeyRecord | None:
        item = self._get(admin_key_key(key_hash))
        return None if item is None else admin_key_from_item(item)

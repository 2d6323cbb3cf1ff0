"""The account-store contract (tenants, users, keys, admin keys), run against SQLite and DynamoDB (moto)."""

from __future__ import annotations

import pytest

from shared.api_keys import hash_api_key, new_api_key
from shared.fleet.tiers import LimitOverrides, SafetyOverrides, Tier
from shared.storage.accounts import TenantChanges, TenantPurpose, TenantStore


def test_tenant_round_trip_and_listing(tenant_store: TenantStore) -> None:
    first = tenant_store.create_tenant("acme", Tier.ENTERPRISE)
    second = tenant_store.create_tenant("bob", Tier.FREE)
    assert tenant_store.get_tenant(first.id) == first
    assert [t.id for t in tenant_store.list_tenants()] == [first.id, second.id]
    assert tenant_store.get_tenant("ten_missing") is None


def test_update_changes_only_the_fields_set(tenant_store: TenantStore) -> None:
    tenant = tenant_store.create_tenant("acme", Tier.PLUS)
    limits = LimitOverrides(key_rpm=7, tenant_tpm=9000)
    updated = tenant_store.update_tenant(
        tenant.id, TenantChanges(tier=Tier.ENTERPRISE, limits=limits, stripe_customer_id="cus_ABC123")
    )
    assert updated is not None
    assert (updated.tier, updated.limits, updated.stripe_customer_id) == (Tier.ENTERPRISE, limits, "cus_ABC123")
    assert (updated.name, updated.retention_days, updated.legal_hold) == ("acme", None, False)
    held = tenant_store.update_tenant(tenant.id, TenantChanges(retention_days=400, legal_hold=True))
    assert held is not None and (held.retention_days, held.legal_hold, held.limits) == (400, True, limits)
    cleared = tenant_store.update_tenant(tenant.id, TenantChanges(limits=None, stripe_customer_id=None))
    assert cleared is not None and (cleared.limits, cleared.stripe_customer_id, cleared.tier) == (
        None,
        None,
        Tier.ENTERPRISE,
    )
    assert tenant_store.get_tenant(tenant.id) == cleared
    assert tenant_store.update_tenant("ten_missing", TenantChanges(tier=Tier.FREE)) is None


def test_custom_instructions_are_kept_with_the_tenant_and_cleared(tenant_store: TenantStore) -> None:
    tenant = tenant_store.create_tenant("acme", Tier.PLUS)
    assert tenant.instructions is None
    text = "Answer in British English.\nBe brief ✓"
    updated = tenant_store.update_tenant(tenant.id, TenantChanges(instructions=text))
    assert updated is not None and updated.instructions == text and updated.tier is Tier.PLUS
    key = new_api_key()
    tenant_store.add_api_key(tenant.id, hash_api_key(key), "k")
    found = tenant_store.find_key_with_tenant(hash_api_key(key))
    assert found is not None and found[1].instructions == text  # what a request's caller carries
    assert tenant_store.update_tenant(tenant.id, TenantChanges(retention_days=30)).instructions == text  # type: ignore[union-attr]
    cleared = tenant_store.update_tenant(tenant.id, TenantChanges(instructions=None))
    assert cleared is not None and cleared.instructions is None
    assert tenant_store.get_tenant(tenant.id) == cleared


def test_safety_overrides_round_trip_and_clear(tenant_store: TenantStore) -> None:
    corp = tenant_store.create_tenant("corp", Tier.ENTERPRISE)
    assert corp.safety is None
    key = new_api_key()
    tenant_store.add_api_key(corp.id, hash_api_key(key), "k")
    overrides = SafetyOverrides(block_outbound_pii=True, audit_raw_content=False)
    updated = tenant_store.update_tenant(corp.id, TenantChanges(safety=overrides))
    assert updated is not None and updated.safety == overrides
    assert tenant_store.get_tenant(corp.id) == updated
    found = tenant_store.find_key_with_tenant(hash_api_key(key))
    assert found is not None and found[1].safety == overrides  # the request path sees it at once
    partial = tenant_store.update_tenant(corp.id, TenantChanges(safety=SafetyOverrides(audit_raw_content=True)))
    assert partial is not None and partial.safety == SafetyOverrides(audit_raw_content=True)  # replaced as a whole
    untouched = tenant_store.update_tenant(corp.id, TenantChanges(name="corp 2"))
    assert untouched is not None and untouched.safety == partial.safety
    cleared = tenant_store.update_tenant(corp.id, TenantChanges(safety=None))
    assert cleared is not None and cleared.safety is None
    assert [t.safety for t in tenant_store.list_tenants()] == [None]
    born = tenant_store.create_tenant("corp 3", Tier.ENTERPRISE, safety=SafetyOverrides(block_outbound_pii=False))
    assert tenant_store.get_tenant(born.id) == born and born.safety == SafetyOverrides(block_outbound_pii=False)


def test_changes_refuse_unknown_safety_settings() -> None:
    with pytest.raises(ValueError, match="unknown safety settings: block_pii"):
        TenantChanges.model_validate({"safety": {"block_pii": True}})


def test_changes_refuse_clearing_required_fields() -> None:
    with pytest.raises(ValueError, match="tier cannot be cleared"):
        TenantChanges(tier=None).changed()


def test_users_are_unique_per_tenant(tenant_store: TenantStore) -> None:
    acme = tenant_store.create_tenant("acme", Tier.PLUS)
    other = tenant_store.create_tenant("other", Tier.PLUS)
    ada = tenant_store.create_user(acme.id, "ada@example.com", "Ada")
    tenant_store.create_user(other.id, "ada@example.com", None)  # same email, another tenant: fine
    with pytest.raises(ValueError):
        tenant_store.create_user(acme.id, "ada@example.com", "Ada again")
    assert tenant_store.list_users(acme.id) == [ada]


def test_keys_are_found_by_hash_with_their_tenant_and_revoked_at_once(tenant_store: TenantStore) -> None:
    acme = tenant_store.create_tenant("acme", Tier.PLUS)
    ada = tenant_store.create_user(acme.id, "ada@example.com", "Ada")
    key = new_api_key()
    record = tenant_store.add_api_key(acme.id, hash_api_key(key), "laptop", user_id=ada.id, hint=key[:7])
    found = tenant_store.find_key_with_tenant(hash_api_key(key))
    assert found is not None and found[0] == record and found[1] == acme
    assert tenant_store.find_key(hash_api_key(key)) == record
    assert tenant_store.list_keys(acme.id) == [record]
    assert record.user_id == ada.id and record.hint == key[:7]

    revoked = tenant_store.revoke_key(record.id)
    assert revoked is not None and revoked.revoked_at is not None
    again = tenant_store.revoke_key(record.id)
    assert again is not None and again.revoked_at == revoked.revoked_at  # idempotent
    found = tenant_store.find_key_with_tenant(hash_api_key(key))
    assert found is not None and found[0].revoked_at == revoked.revoked_at
    assert tenant_store.find_key_with_tenant(hash_api_key(new_api_key())) is None


def test_revoke_scoped_to_a_tenant_cannot_touch_another_tenants_key(tenant_store: TenantStore) -> None:
    acme = tenant_store.create_tenant("acme", Tier.PLUS)
    other = tenant_store.create_tenant("other", Tier.PLUS)
    record = tenant_store.add_api_key(acme.id, hash_api_key(new_api_key()), "k")
    assert tenant_store.revoke_key(record.id, tenant_id=other.id) is None
    assert tenant_store.list_keys(acme.id)[0].revoked_at is None
    assert tenant_store.revoke_key("key_missing") is None


def test_key_lookup_sees_the_tenants_current_settings(tenant_store: TenantStore) -> None:
    acme = tenant_store.create_tenant("acme", Tier.FREE)
    key = new_api_key()
    tenant_store.add_api_key(acme.id, hash_api_key(key), "k")
    tenant_store.update_tenant(acme.id, TenantChanges(tier=Tier.PLUS, limits=LimitOverrides(key_rpm=3)))
    found = tenant_store.find_key_with_tenant(hash_api_key(key))
    assert found is not None and found[1].tier is Tier.PLUS and found[1].limits == LimitOverrides(key_rpm=3)


def test_admin_keys(tenant_store: TenantStore) -> None:
    key = new_api_key()
    record = tenant_store.add_admin_key(hash_api_key(key), "ops")
    assert tenant_store.find_admin_key(hash_api_key(key)) == record
    assert tenant_store.find_admin_key(hash_api_key(new_api_key())) is None
    # An admin key is not a tenant key and vice versa.
    assert tenant_store.find_key(hash_api_key(key)) is None


def test_tenant_purpose_round_trips_and_defaults_to_customer(tenant_store: TenantStore) -> None:
    customer = tenant_store.create_tenant("acme", Tier.PLUS)
    evals = tenant_store.create_tenant("eval-free", Tier.FREE, purpose=TenantPurpose.EVAL)
    assert (customer.purpose, customer.billable) == (TenantPurpose.CUSTOMER, True)
    assert (evals.purpose, evals.billable) == (TenantPurpose.EVAL, False)
    assert tenant_store.get_tenant(evals.id) == evals
    assert [t.purpose for t in tenant_store.list_tenants()] == [TenantPurpose.CUSTOMER, TenantPurpose.EVAL]
    key = new_api_key()
    tenant_store.add_api_key(evals.id, hash_api_key(key), "eval")
    found = tenant_store.find_key_with_tenant(hash_api_key(key))
    assert found is not None and found[1].purpose is TenantPurpose.EVAL
    changed = tenant_store.update_tenant(evals.id, TenantChanges(name="eval free"))
    assert changed is not None and changed.purpose is TenantPurpose.EVAL  # other changes keep it

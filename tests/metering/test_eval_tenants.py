"""Eval traffic is not customer usage: an eval tenant's ledger entries never become Stripe meter events."""

from __future__ import annotations

from datetime import timedelta

from shared.fleet.tiers import Tier
from shared.storage.accounts import TenantChanges, TenantPurpose
from shared.storage.sqlite.accounts import SQLiteStore
from tests.metering.conftest import HOUR0, World


def _eval_tenant(world: World, customer: str) -> str:
    store = SQLiteStore(world.db_path)
    try:
        tenant = store.create_tenant("eval-plus", Tier.PLUS, purpose=TenantPurpose.EVAL)
        # Even with a Stripe customer set (a mistake an operator could make), eval usage is never sent.
        store.update_tenant(tenant.id, TenantChanges(stripe_customer_id=customer))
        return tenant.id
    finally:
        store.close()


def test_eval_usage_is_never_sent_to_stripe(world: World) -> None:
    acme = world.tenant("acme", "cus_Acme")
    evals = _eval_tenant(world, "cus_Eval")
    for hour in range(3):
        world.usage(acme, HOUR0 + timedelta(hours=hour, minutes=5), prompt=100 + hour)
        world.usage(evals, HOUR0 + timedelta(hours=hour, minutes=6), prompt=5000, completion=900)
    report = world.flush()
    assert report.ok, report.failure
    assert world.fake.events, "the customer's usage was sent"
    assert {event.customer_id for event in world.fake.events} == {"cus_Acme"}
    assert evals in report.skipped_tenants
    assert all(send.tenant_id != evals for send in world.outbox())
    sent_input = world.fake.totals()[("cus_Acme", "fleetchat_input_tokens")]
    assert sent_input == 100 + 101 + 102, "eval tokens are not added to anyone's bill"

"""Embedding tokens go to Stripe as their own meter event (`fleetchat_embedding_tokens`), never mixed into the chat
input meter: through the real exporter and the real-HTTP Stripe fake."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

from functions.metering.meters import meters_from_settings
from shared.storage.ledger import EMBEDDING_MODEL_PREFIX, RERANK_MODEL_PREFIX, LedgerEntry, Outcome, TenantTotals
from shared.storage.sqlite.ledger import SQLiteLedger
from tests.metering.conftest import HOUR0, World


def _embedding_usage(world: World, tenant_id: str, tokens: int) -> None:
    ledger = SQLiteLedger(world.db_path)
    try:
        assert ledger.record(
            LedgerEntry(
                request_id=f"req_{uuid.uuid4().hex}", tenant_id=tenant_id, key_id=None,
                model=EMBEDDING_MODEL_PREFIX + "text-embedding-minilm", prompt_tokens=tokens, completion_tokens=0,
                cached_tokens=0, outcome=Outcome.COMPLETED, created_at=HOUR0 + timedelta(minutes=20),
            )
        )  # fmt: skip
    finally:
        ledger.close()


def test_the_embedding_meter_reads_only_embedding_tokens(world: World) -> None:
    totals = TenantTotals(
        tenant_id="t", requests=3, prompt_tokens=100, completion_tokens=20, cached_tokens=40, embedding_tokens=512
    )
    values = {meter.event_name: meter.value(totals) for meter in meters_from_settings(world.settings())}
    assert values == {
        "fleetchat_input_tokens": 60,
        "fleetchat_cached_input_tokens": 40,
        "fleetchat_output_tokens": 20,
        "fleetchat_embedding_tokens": 512,
        "fleetchat_rerank_tokens": 0,  # issue 49: /v1/rerank's pair tokens; none here
        # issue 48: the batch meters read only batch tokens; there are none here
        "fleetchat_batch_input_tokens": 0,
        "fleetchat_batch_cached_input_tokens": 0,
        "fleetchat_batch_output_tokens": 0,
        "fleetchat_batch_embedding_tokens": 0,
    }


def test_embedding_tokens_are_exported_on_their_own_stripe_meter(world: World) -> None:
    acme = world.tenant("acme", "cus_Acme")
    world.usage(acme, HOUR0 + timedelta(minutes=10), prompt=100, completion=20)
    _embedding_usage(world, acme, 700)
    _embedding_usage(world, acme, 33)
    report = world.flush()
    assert report.ok
    assert world.fake.totals() == {
        ("cus_Acme", "fleetchat_input_tokens"): Decimal(100),
        ("cus_Acme", "fleetchat_output_tokens"): Decimal(20),
        ("cus_Acme", "fleetchat_embedding_tokens"): Decimal(733),
    }
    assert any("-emb-" in event.identifier for event in world.fake.events)
    world.assert_stripe_matches_ledger()


def test_rerank_tokens_are_exported_on_their_own_stripe_meter(world: World) -> None:
    acme = world.tenant("acme", "cus_Acme")
    world.usage(acme, HOUR0 + timedelta(minutes=10), prompt=100, completion=20)
    _embedding_usage(world, acme, 7)
    ledger = SQLiteLedger(world.db_path)
    try:
        ledger.record(
            LedgerEntry(
                request_id="req_rerank", tenant_id=acme, key_id=None, model=RERANK_MODEL_PREFIX + "rerank-minilm",
                prompt_tokens=480, completion_tokens=0, cached_tokens=0, outcome=Outcome.COMPLETED,
                created_at=HOUR0 + timedelta(minutes=25),
            )
        )  # fmt: skip
    finally:
        ledger.close()
    assert world.flush().ok
    assert world.fake.totals() == {
        ("cus_Acme", "fleetchat_input_tokens"): Decimal(100),
        ("cus_Acme", "fleetchat_output_tokens"): Decimal(20),
        ("cus_Acme", "fleetchat_embedding_tokens"): Decimal(7),
        ("cus_Acme", "fleetchat_rerank_tokens"): Decimal(480),
    }

"""A billing world for the exporter tests: SQLite stores in a temp dir, tenants with Stripe customers, a real-HTTP
Stripe fake, and the ledger's own totals to compare the fake's against."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from functions.metering.exporter import FlushReport, flush_from_settings
from functions.metering.meters import align_down, ledger_values, meters_from_settings
from functions.metering.stripe_sender import RetryPolicy
from shared.fleet.tiers import Tier
from shared.settings import Settings
from shared.storage.accounts import TenantChanges
from shared.storage.ledger import LedgerEntry, MeterSend, Outcome
from shared.storage.sqlite.accounts import SQLiteStore
from shared.storage.sqlite.ledger import SQLiteLedger, SQLiteMeterState
from tests.support.fake_stripe import FakeStripe

API_KEY = "sk_test_fleetchat_meter"
# Real time: the fake checks event timestamps against its own clock (35 days back at most).
NOW = datetime.now(UTC)
HOUR0 = align_down(NOW, 3600) - timedelta(hours=6)  # the first window with usage, long closed
# No sleeping between retries: the retry tests count attempts, not seconds.
FAST = RetryPolicy(attempts=4, wait_initial_s=0, wait_max_s=0, timeout_s=5)


@dataclass
class World:
    data_dir: Path
    fake: FakeStripe

    @property
    def db_path(self) -> Path:
        return self.data_dir / "fleetchat.db"

    def settings(self, **overrides: object) -> Settings:
        stripe = {"api_key": API_KEY, "api_base": self.fake.url, **overrides.pop("stripe", {})}  # type: ignore[dict-item]
        return Settings(**{"data_dir": self.data_dir, "stripe": stripe, **overrides})

    def env(self) -> dict[str, str]:
        return {
            "FLEETCHAT_DATA_DIR": str(self.data_dir),
            "FLEETCHAT_STRIPE_API_KEY": API_KEY,
            "FLEETCHAT_STRIPE_API_BASE": self.fake.url,
        }

    def tenant(self, name: str, customer: str | None) -> str:
        store = SQLiteStore(self.db_path)
        try:
            tenant = store.create_tenant(name, Tier.PLUS)
            if customer is not None:
                store.update_tenant(tenant.id, TenantChanges(stripe_customer_id=customer))
            return tenant.id
        finally:
            store.close()

    def usage(self, tenant_id: str, at: datetime, prompt: int = 100, completion: int = 20, cached: int = 0) -> None:
        ledger = SQLiteLedger(self.db_path)
        try:
            entry = LedgerEntry(
                request_id=f"req_{uuid.uuid4().hex}",
                tenant_id=tenant_id,
                key_id=None,
                model="mini",
                prompt_tokens=prompt,
                completion_tokens=completion,
                cached_tokens=cached,
                outcome=Outcome.COMPLETED,
                created_at=at,
            )
            assert ledger.record(entry)
        finally:
            ledger.close()

    def ledger_totals(self, start: datetime = HOUR0 - timedelta(days=2), end: datetime = NOW) -> dict:
        """What the ledger bills per (customer, meter event name), billed tenants only, 0s left out."""
        store, ledger = SQLiteStore(self.db_path), SQLiteLedger(self.db_path)
        try:
            customers = {tenant.id: tenant.stripe_customer_id for tenant in store.list_tenants()}
            values = ledger_values(ledger.totals(start, end), meters_from_settings(self.settings()))
        finally:
            store.close()
            ledger.close()
        sums: dict[tuple[str, str], Decimal] = {}
        for (tenant, meter), value in values.items():
            if customers.get(tenant) and value:
                key = (customers[tenant], meter)
                sums[key] = sums.get(key, Decimal(0)) + value
        return sums

    def outbox(self) -> list[MeterSend]:
        state = SQLiteMeterState(self.db_path)
        try:
            return state.sends(HOUR0 - timedelta(days=60), NOW + timedelta(days=1))
        finally:
            state.close()

    def cursor(self) -> datetime | None:
        state = SQLiteMeterState(self.db_path)
        try:
            return state.get_cursor()
        finally:
            state.close()

    def flush(self, now: datetime = NOW, **kwargs: object) -> FlushReport:
        kwargs.setdefault("policy", FAST)
        return flush_from_settings(self.settings(), now, show_progress=False, **kwargs)

    def assert_stripe_matches_ledger(self) -> None:
        assert self.fake.totals() == self.ledger_totals()
        identifiers = [event.identifier for event in self.fake.events]
        assert len(identifiers) == len(set(identifiers)), "an identifier was accepted twice"
        outbox = self.outbox()
        assert all(send.sent_at is not None for send in outbox), "every outbox row confirmed"
        assert {send.identifier for send in outbox} == set(identifiers)


@pytest.fixture(scope="module")
def stripe_server() -> Iterator[FakeStripe]:
    with FakeStripe(api_key=API_KEY) as fake:
        yield fake


@pytest.fixture
def fake(stripe_server: FakeStripe) -> Iterator[FakeStripe]:
    stripe_server.clear()
    stripe_server.come_back()
    yield stripe_server
    stripe_server.come_back()


@pytest.fixture
def world(tmp_path: Path, fake: FakeStripe) -> World:
    return World(tmp_path, fake)


@pytest.fixture
def billed(world: World) -> tuple[str, str]:
    return seed_billed(world)


def seed_billed(world: World) -> tuple[str, str]:
    """Two billed tenants with usage in three closed windows (one with cached prompt tokens)."""
    acme, globex = world.tenant("acme", "cus_Acme"), world.tenant("globex", "cus_Globex")
    for hour in range(3):
        at = HOUR0 + timedelta(hours=hour, minutes=10)
        world.usage(acme, at, prompt=100 + hour, completion=20, cached=40)
        world.usage(acme, at + timedelta(minutes=30), prompt=7, completion=3)
        world.usage(globex, at, prompt=55, completion=11 * (hour + 1))
    return acme, globex

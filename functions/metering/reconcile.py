"""Reconciliation: ledger totals against the meter events sent (confirmed) and pending, per tenant x meter x window.

It reads the exporter's outbox, not Stripe: what Stripe did with an accepted event (e.g. an unknown customer found
asynchronously) shows in Stripe's own meter event summaries and error reports.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pydantic import BaseModel, computed_field

from functions.metering.exporter import CustomerLookup, customer_lookup
from functions.metering.meters import (
    Meter,
    MeterKey,
    Window,
    align_down,
    ledger_values,
    meters_from_settings,
    windows,
)
from shared.settings import Settings
from shared.storage.ledger import LedgerStore, MeterStateStore
from shared.storage.timestamps import utc_now

DEFAULT_DAYS = 7
_DAY = timedelta(days=1)


class ReconcileRow(BaseModel):
    """One tenant x meter x window where the outbox and the ledger disagree."""

    tenant_id: str
    customer_id: str
    meter: str
    window_start: datetime
    ledger: int
    sent: int  # confirmed by Stripe
    pending: int  # written, not yet confirmed
    settled: bool  # past the grace period: the exporter should have sent it by now

    @property
    def missing(self) -> int:
        return self.ledger - self.sent


class MeterTotal(BaseModel):
    """One meter over the whole range, billed tenants only."""

    meter: str
    ledger: int = 0
    sent: int = 0
    pending: int = 0


class NotBilled(BaseModel):
    """A tenant with usage but no Stripe customer: ledger only."""

    tenant_id: str
    units: dict[str, int]  # meter event name -> ledger units


class ReconcileReport(BaseModel):
    start: datetime
    end: datetime
    windows: int = 0
    rows: list[ReconcileRow] = []
    totals: list[MeterTotal] = []
    not_billed: list[NotBilled] = []

    @computed_field
    @property
    def ok(self) -> bool:
        """No billed tenant's settled window differs (pending or recent windows are not failures yet)."""
        return not any(row.settled and row.sent != row.ledger for row in self.rows)


def _outbox(
    state: MeterStateStore, start: datetime, end: datetime, window_s: int
) -> dict[datetime, dict[MeterKey, list[int]]]:
    """Per window start: {(tenant, meter): [sent, pending]}."""
    out: dict[datetime, dict[MeterKey, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for send in state.sends(start, end):
        out[align_down(send.window_start, window_s)][(send.tenant_id, send.meter)][send.sent_at is None] += send.value
    return out


@dataclass
class _Reconciler:
    ledger: LedgerStore
    customer_of: CustomerLookup
    meters: tuple[Meter, ...]
    report: ReconcileReport
    now: datetime
    grace: timedelta
    totals: dict[str, MeterTotal] = field(default_factory=dict)
    _customers: dict[str, str | None] = field(default_factory=dict)

    def customer(self, tenant_id: str) -> str | None:
        if tenant_id not in self._customers:
            self._customers[tenant_id] = self.customer_of(tenant_id)
        return self._customers[tenant_id]

    def compare(self, window: Window, sends: dict[MeterKey, list[int]]) -> None:
        values = ledger_values(self.ledger.totals(window.start, window.end), self.meters)
        settled = window.end + self.grace <= self.now
        for tenant, meter in sorted(values.keys() | sends.keys()):
            customer_id = self.customer(tenant)
            if customer_id is None:
                continue
            value = values.get((tenant, meter), 0)
            sent, pending = sends.get((tenant, meter), (0, 0))
            total = self.totals.setdefault(meter, MeterTotal(meter=meter))
            total.ledger, total.sent, total.pending = total.ledger + value, total.sent + sent, total.pending + pending
            if sent != value or pending:
                row = ReconcileRow(
                    tenant_id=tenant,
                    customer_id=customer_id,
                    meter=meter,
                    window_start=window.start,
                    ledger=value,
                    sent=sent,
                    pending=pending,
                    settled=settled,
                )
                self.report.rows.append(row)


def run_reconcile(
    ledger: LedgerStore,
    state: MeterStateStore,
    customer_of: CustomerLookup,
    meters: tuple[Meter, ...],
    *,
    start: datetime,
    end: datetime,
    window_s: int,
    grace_s: int,
    now: datetime | None = None,
) -> ReconcileReport:
    """Compare [start, end) window by window; a day with neither ledger entries nor sends costs one totals() call."""
    start, end = align_down(start, window_s), align_down(end, window_s)
    report = ReconcileReport(start=start, end=end)
    run = _Reconciler(ledger, customer_of, meters, report, now or utc_now(), timedelta(seconds=grace_s))
    run.totals = {meter.event_name: MeterTotal(meter=meter.event_name) for meter in meters}
    outbox = _outbox(state, start, end, window_s)
    for row in ledger.totals(start, end):
        if run.customer(row.tenant_id) is None:
            units = {meter.event_name: meter.value(row) for meter in meters}
            report.not_billed.append(NotBilled(tenant_id=row.tenant_id, units=units))
    day = start
    while day < end:
        day_end = min(day + _DAY, end)
        day_windows = list(windows(day, day_end, window_s))
        report.windows += len(day_windows)
        if any(window.start in outbox for window in day_windows) or ledger.totals(day, day_end):
            for window in day_windows:
                run.compare(window, outbox.get(window.start, {}))
        day = day_end
    report.totals = list(run.totals.values())
    return report


def reconcile_from_settings(
    settings: Settings,
    *,
    now: datetime | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> ReconcileReport:
    """The configured stores, over [since, until) (default: the last 7 days of closed windows)."""
    from shared.storage.factory import open_ledger, open_meter_state, open_tenant_store

    now = now or utc_now()
    end = until or align_down(now, settings.meter.window_s)
    start = since or end - timedelta(days=DEFAULT_DAYS)
    tenants, ledger, state = open_tenant_store(settings), open_ledger(settings), open_meter_state(settings)

    try:
        return run_reconcile(
            ledger,
            state,
            customer_lookup(tenants),
            meters_from_settings(settings),
            start=start,
            end=end,
            window_s=settings.meter.window_s,
            grace_s=settings.meter.grace_s,
            now=now,
        )
    finally:
        state.close()
        ledger.close()
        tenants.close()

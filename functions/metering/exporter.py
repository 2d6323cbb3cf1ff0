"""The meter exporter: ledger totals per tenant x meter x closed window, sent to Stripe exactly once via an outbox.

Every event is written to the outbox as pending before it is sent and marked sent once Stripe has it; its identifier
is deterministic, so re-sending a pending event after a crash is harmless (Stripe refuses the duplicate, which counts
as delivered). A run first re-sends what is pending, then walks the closed windows from the cursor, and moves the
cursor past a window only once every send for it is confirmed; it stops at the first window it cannot complete.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from pydantic import BaseModel, computed_field
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from functions.metering.meters import (
    Meter,
    MeterKey,
    Window,
    align_down,
    closed_until,
    count_windows,
    exportable_from,
    identifier,
    ledger_values,
    meters_from_settings,
    windows,
)
from functions.metering.stripe_sender import MeterEventSender, RetryPolicy, SendOutcome, StripeSendError
from shared.settings import Settings
from shared.storage.accounts import TenantStore
from shared.storage.ledger import LedgerStore, MeterSend, MeterStateStore
from shared.storage.timestamps import utc_now

logger = logging.getLogger(__name__)

# Windows behind the cursor that every run re-checks for late ledger entries (each becomes a correction event): a day,
# as long as the gateway's ledger spool may hold entries while the ledger store is down.
REVISIT_WINDOWS = 24
# Windows checked with one ledger query and one outbox query; only a chunk that differs is walked window by window.
CHUNK_WINDOWS = 24
LEDGER_ONLY_WARNING = (
    "Stripe metering is off (no FLEETCHAT_STRIPE_API_KEY): usage is kept in the ledger only, no meter events are sent"
)

CustomerLookup = Callable[[str], str | None]
_Chunk = tuple[datetime, datetime]


class EventSender(Protocol):
    def send(self, event: MeterSend) -> SendOutcome: ...


class OverBilled(BaseModel):
    """Stripe has more than the ledger for this window; a meter event cannot take it back (that needs a Stripe meter
    event adjustment, which this exporter does not make)."""

    tenant_id: str
    meter: str
    window_start: datetime
    ledger: int
    sent: int


class FlushReport(BaseModel):
    stripe_enabled: bool = True
    windows: int = 0  # closed windows covered (ahead of the cursor plus those re-checked behind it)
    windows_with_sends: int = 0
    events_sent: int = 0  # accepted by Stripe on this run
    already_there: int = 0  # refused as duplicates: an earlier, interrupted attempt had got through
    resent_pending: int = 0  # pending outbox rows from an earlier run, delivered first
    corrections: int = 0  # late ledger entries sent as an extra event for a window already exported
    raced: int = 0  # another exporter wrote the same event first
    skipped_tenants: list[str] = []  # usage, but no Stripe customer: ledger only
    over_billed: list[OverBilled] = []
    not_exportable_windows: int = 0  # older than Stripe accepts (35 days): never sent
    not_exportable_units: int = 0
    expired_pending: int = 0  # pending outbox rows too old to re-send
    failures: int = 0
    failure: str | None = None  # why the run stopped early; the next run resumes
    failed_window: datetime | None = None
    cursor: datetime | None = None  # after the run

    @computed_field
    @property
    def ok(self) -> bool:
        return self.failure is None


class _Stop(Exception):
    """A send failed after its retries: the run ends here, resumable."""


@dataclass
class _Run:
    ledger: LedgerStore
    state: MeterStateStore
    customer_of: CustomerLookup
    sender: EventSender
    meters: tuple[Meter, ...]
    window_s: int
    report: FlushReport = field(default_factory=FlushReport)
    _customers: dict[str, str | None] = field(default_factory=dict)

    def customer(self, tenant_id: str) -> str | None:
        if tenant_id not in self._customers:
            self._customers[tenant_id] = self.customer_of(tenant_id)
            if self._customers[tenant_id] is None and tenant_id not in self.report.skipped_tenants:
                self.report.skipped_tenants.append(tenant_id)
        return self._customers[tenant_id]

    def deliver(self, send: MeterSend) -> None:
        try:
            outcome = self.sender.send(send)
        except StripeSendError as exc:
            self.report.failures += 1
            self.report.failure = str(exc)
            self.report.failed_window = send.window_start
            logger.error("meter export stopped, the next run resumes here: %s", exc)
            raise _Stop from exc
        self.state.mark_sent(send.identifier, utc_now())
        if outcome is SendOutcome.ALREADY_THERE:
            self.report.already_there += 1
        else:
            self.report.events_sent += 1

    def differs(self, start: datetime, end: datetime) -> bool:
        """Whether the ledger and the outbox disagree anywhere in [start, end) for a billed tenant."""
        ledger = ledger_values(self.ledger.totals(start, end), self.meters)
        sent = _sums(self.state.sends(start, end))
        return any(
            ledger.get(key, 0) != sent.get(key, 0) and self.customer(key[0]) is not None
            for key in ledger.keys() | sent.keys()
        )

    def export(self, window: Window) -> None:
        """Bring Stripe up to the ledger for one window: confirm what is pending, then send each shortfall."""
        by_key: dict[MeterKey, list[MeterSend]] = defaultdict(list)
        for send in self.state.sends(window.start, window.end):
            if send.sent_at is None:  # another exporter's, still in flight: re-sending it is harmless
                self.deliver(send)
            by_key[(send.tenant_id, send.meter)].append(send)
        ledger = ledger_values(self.ledger.totals(window.start, window.end), self.meters)
        sent_any = False
        for tenant, event_name in sorted(ledger.keys() | by_key.keys()):
            customer = self.customer(tenant)
            if customer is None:
                continue
            target, prior = ledger.get((tenant, event_name), 0), by_key[(tenant, event_name)]
            already = sum(send.value for send in prior)
            if target < already:
                self.report.over_billed.append(
                    OverBilled(
                        tenant_id=tenant, meter=event_name, window_start=window.start, ledger=target, sent=already
                    )
                )
                continue
            meter = next((m for m in self.meters if m.event_name == event_name), None)
            if target == already or meter is None:
                continue
            send = MeterSend(
                identifier=identifier(tenant, meter, window.start, len(prior)),
                tenant_id=tenant,
                customer_id=customer,
                meter=event_name,
                window_start=window.start,
                value=target - already,
            )
            if not self.state.add_pending(send):
                self.report.raced += 1  # the other exporter sends it (or the next run's pending pass does)
                continue
            self.deliver(send)
            sent_any = True
            if prior:
                self.report.corrections += 1
        self.report.windows_with_sends += sent_any


def _sums(sends: list[MeterSend]) -> dict[MeterKey, int]:
    sums: dict[MeterKey, int] = defaultdict(int)
    for send in sends:
        sums[(send.tenant_id, send.meter)] += send.value
    return sums


def _chunks(start: datetime, end: datetime, window_s: int) -> list[_Chunk]:
    step = timedelta(seconds=window_s * CHUNK_WINDOWS)
    bounds, moment = [], align_down(start, window_s)
    while moment < end:
        bounds.append((moment, min(moment + step, end)))
        moment += step
    return bounds


def run_flush(
    ledger: LedgerStore,
    state: MeterStateStore,
    customer_of: CustomerLookup,
    sender: EventSender,
    meters: tuple[Meter, ...],
    *,
    window_s: int,
    grace_s: int,
    now: datetime | None = None,
    since: datetime | None = None,
    revisit_windows: int = REVISIT_WINDOWS,
    show_progress: bool = True,
) -> FlushReport:
    """One export run. `since`: where to start with no cursor yet (default: the oldest window Stripe accepts), or,
    before the cursor, how far back to re-check exported windows for late ledger entries."""
    now = now or utc_now()
    run = _Run(ledger, state, customer_of, sender, meters, window_s)
    end, horizon = closed_until(now, window_s, grace_s), exportable_from(now, window_s)
    cursor = state.get_cursor()
    behind: list[_Chunk] = []
    if cursor is not None:
        behind_from = cursor - revisit_windows * timedelta(seconds=window_s)
        if since is not None:
            behind_from = min(behind_from, align_down(since, window_s))
        behind = _chunks(max(behind_from, horizon), min(cursor, end), window_s)
    ahead_from = cursor or align_down(since or horizon, window_s)
    try:
        _resend_pending(run, horizon)
        if ahead_from < horizon:
            _write_off(run, ahead_from, min(horizon, end))
            ahead_from = horizon
        _walk(run, behind, _chunks(ahead_from, end, window_s), show_progress)
    except _Stop:
        pass
    run.report.cursor = state.get_cursor()
    return run.report


def _resend_pending(run: _Run, horizon: datetime) -> None:
    """Deliver what an earlier run wrote but never confirmed, verbatim (same identifier, same value)."""
    for send in run.state.pending():
        if send.window_start < horizon:
            run.report.expired_pending += 1
            logger.warning("meter event %s is too old for Stripe and stays unsent", send.identifier)
            continue
        run.deliver(send)
        run.report.resent_pending += 1


def _walk(run: _Run, behind: list[_Chunk], ahead: list[_Chunk], show_progress: bool) -> None:
    """Export every chunk that differs from the outbox; only chunks ahead of the cursor move it."""
    window_s, report = run.window_s, run.report
    columns = (TextColumn("meter flush"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not show_progress) as progress:
        task = progress.add_task("windows", total=sum(count_windows(*c, window_s) for c in behind + ahead))
        for chunk, moves_cursor in [(c, False) for c in behind] + [(c, True) for c in ahead]:
            if not run.differs(*chunk):
                report.windows += count_windows(*chunk, window_s)
                progress.advance(task, count_windows(*chunk, window_s))
                if moves_cursor:
                    run.state.set_cursor(chunk[1])
                continue
            for window in windows(*chunk, window_s):
                run.export(window)
                if moves_cursor:
                    run.state.set_cursor(window.end)
                report.windows += 1
                progress.advance(task)


def _write_off(run: _Run, start: datetime, end: datetime) -> None:
    """Windows too old for Stripe's timestamp limit: count what they would have billed, move past them."""
    if start >= end:
        return
    ledger = ledger_values(run.ledger.totals(start, end), run.meters)
    sent = _sums(run.state.sends(start, end))
    lost = sum(max(value - sent.get(key, 0), 0) for key, value in ledger.items() if run.customer(key[0]) is not None)
    run.report.not_exportable_windows += count_windows(start, end, run.window_s)
    run.report.not_exportable_units += lost
    if lost:
        logger.warning("%d metered units in windows before %s are too old for Stripe and were not sent", lost, end)
    run.state.set_cursor(end)


def customer_lookup(tenants: TenantStore) -> CustomerLookup:
    """A tenant's Stripe customer (None: no such tenant, not billed through Stripe, or an eval tenant: eval traffic
    is never customer usage, whatever customer id the tenant carries)."""

    def customer_of(tenant_id: str) -> str | None:
        tenant = tenants.get_tenant(tenant_id)
        return None if tenant is None or not tenant.billable else tenant.stripe_customer_id

    return customer_of


def flush_from_settings(
    settings: Settings,
    now: datetime | None = None,
    *,
    since: datetime | None = None,
    policy: RetryPolicy | None = None,
    revisit_windows: int = REVISIT_WINDOWS,
    show_progress: bool = True,
) -> FlushReport:
    """The job as the CLI and the Modal schedule run it: the configured stores, Stripe when a key is set."""
    if settings.stripe.api_key is None:
        logger.warning(LEDGER_ONLY_WARNING)
        return FlushReport(stripe_enabled=False)
    from shared.storage.factory import open_ledger, open_meter_state, open_tenant_store

    tenants, ledger, state = open_tenant_store(settings), open_ledger(settings), open_meter_state(settings)
    sender = MeterEventSender(
        settings.stripe.api_key.get_secret_value(), api_base=settings.stripe.api_base, policy=policy
    )

    try:
        return run_flush(
            ledger,
            state,
            customer_lookup(tenants),
            sender,
            meters_from_settings(settings),
            window_s=settings.meter.window_s,
            grace_s=settings.meter.grace_s,
            now=now,
            since=since,
            revisit_windows=revisit_windows,
            show_progress=show_progress,
        )
    finally:
        sender.close()
        state.close()
        ledger.close()
        tenants.close()

"""The `fleetchat meter-flush` and `fleetchat meter-reconcile` commands (registered on the CLI's typer app)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from shared.settings import Settings

DataDir = Annotated[Path | None, typer.Option(help="Where the database lives.")]
AsOf = Annotated[datetime | None, typer.Option(help="Run as if it were this UTC time (ISO 8601); default: now.")]

_FLUSH_COUNTERS = (
    "windows",
    "windows_with_sends",
    "events_sent",
    "already_there",
    "resent_pending",
    "corrections",
    "raced",
    "expired_pending",
    "not_exportable_windows",
    "not_exportable_units",
    "failures",
)


def _utc(moment: datetime | None) -> datetime | None:
    return None if moment is None else moment.replace(tzinfo=moment.tzinfo or UTC)


def _settings(data_dir: Path | None) -> Settings:
    from shared.settings import Settings

    return Settings(data_dir=data_dir) if data_dir is not None else Settings()


def meter_flush(
    data_dir: DataDir = None,
    as_of: AsOf = None,
    since: Annotated[
        datetime | None,
        typer.Option(
            help="With nothing exported yet: the first window to export (default: the oldest Stripe accepts, 35 days"
            " back). Otherwise: re-check exported windows from here for late ledger entries."
        ),
    ] = None,
) -> None:
    """Send the ledger's totals per closed window to Stripe as Billing meter events, exactly once; resumable."""
    from functions.metering.exporter import flush_from_settings

    report = flush_from_settings(_settings(data_dir), now=_utc(as_of), since=_utc(since))
    if not report.stripe_enabled:
        return  # the exporter logged the one ledger-only warning
    console = Console()
    table = Table("meter flush", "count")
    for name in _FLUSH_COUNTERS:
        table.add_row(name.replace("_", " "), str(getattr(report, name)))
    table.add_row("tenants without a Stripe customer", str(len(report.skipped_tenants)))
    console.print(table)
    console.print(f"cursor: {report.cursor.isoformat() if report.cursor else 'none'}")
    for over in report.over_billed:
        console.print(
            f"[yellow]over-billed[/]: {over.tenant_id} {over.meter} window {over.window_start.isoformat()}: "
            f"ledger {over.ledger} < sent {over.sent} (needs a Stripe meter event adjustment)"
        )
    if report.not_exportable_units:
        console.print(
            f"[yellow]{report.not_exportable_units} units in windows older than 35 days were never sent[/]"
            " (Stripe refuses older event timestamps)"
        )
    if not report.ok:
        window = report.failed_window.isoformat() if report.failed_window else "?"
        typer.echo(
            f"meter flush stopped at window {window}: {report.failure}. Nothing is lost: re-run to resume.", err=True
        )
        raise typer.Exit(code=1)


def meter_reconcile(
    data_dir: DataDir = None,
    as_of: AsOf = None,
    since: Annotated[
        datetime | None, typer.Option(help="Start of the range (UTC); default: 7 days before --until.")
    ] = None,
    until: Annotated[
        datetime | None, typer.Option(help="End of the range (UTC, exclusive); default: the last closed window.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Compare the ledger with the meter events sent, per tenant x meter x window; exit 1 on a settled difference."""
    from functions.metering.reconcile import reconcile_from_settings

    report = reconcile_from_settings(_settings(data_dir), now=_utc(as_of), since=_utc(since), until=_utc(until))
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
    else:
        console = Console()
        console.print(
            f"meter reconcile {report.start.isoformat()} .. {report.end.isoformat()} ({report.windows} windows)"
        )
        if report.rows:
            rows = Table(
                "tenant", "customer", "meter", "window (UTC)", "ledger", "sent", "pending", "missing", "status"
            )
            for column in rows.columns[:3]:
                column.overflow = "fold"  # ids are what an operator searches for: never cut them short
            for row in report.rows:
                status = "[red]differs[/]" if row.settled else "within grace"
                rows.add_row(
                    row.tenant_id,
                    row.customer_id,
                    row.meter,
                    f"{row.window_start:%Y-%m-%d %H:%M}",
                    str(row.ledger),
                    str(row.sent),
                    str(row.pending),
                    str(row.missing),
                    status,
                )
            console.print(rows)
        else:
            console.print("every billed tenant's meter events match the ledger")
        totals = Table("meter", "ledger", "sent", "pending", title="billed tenants, whole range")
        for total in report.totals:
            totals.add_row(total.meter, str(total.ledger), str(total.sent), str(total.pending))
        console.print(totals)
        for tenant in report.not_billed:
            units = ", ".join(f"{meter} {value}" for meter, value in tenant.units.items())
            console.print(f"not billed (no Stripe customer): {tenant.tenant_id}: {units}")
    if not report.ok:
        raise typer.Exit(code=1)

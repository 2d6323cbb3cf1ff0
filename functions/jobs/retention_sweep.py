"""The retention sweep: delete expired and purge-due conversations from every store, with an audit record each.

Idempotent and resumable: every deletion removes the record last, so an interrupted run leaves the record due and
the next run finishes it. DynamoDB TTL is only a backstop; reads already hide expired records.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from pydantic import BaseModel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from functions.retention import expiry_for
from shared.settings import Settings
from shared.storage.base import Tenant
from shared.storage.conversations import (
    AuditRecord,
    ConversationStore,
    StoreUnavailableError,
    SweepCandidate,
    SweepReason,
)
from shared.storage.factory import open_conversation_store, open_tenant_store
from shared.storage.timestamps import to_iso, utc_now

SWEEP_ACTOR = "retention-sweep"
# Give up on a run after this many store failures in a row (the store is down; the next run resumes).
MAX_CONSECUTIVE_FAILURES = 5

TenantLookup = Callable[[str], Tenant | None]


class SweepReport(BaseModel):
    examined: int = 0
    expired: int = 0
    purged: int = 0
    held: int = 0  # legal hold: kept, untouched
    rescheduled: int = 0  # the tenant's retention changed since the last write: new expiry, kept
    already_gone: int = 0
    unknown_tenant: int = 0  # kept: without the tenant its legal hold cannot be checked
    failed: int = 0
    dry_run: bool = False

    @property
    def deleted(self) -> int:
        return self.expired + self.purged


_COUNTERS = {
    "unknown": "unknown_tenant",
    "hold": "held",
    "reschedule": "rescheduled",
    "expire": "expired",
    "purge": "purged",
}


def _count(report: SweepReport, action: str) -> None:
    name = _COUNTERS[action]
    setattr(report, name, getattr(report, name) + 1)


def _decide(candidate: SweepCandidate, tenant: Tenant | None, now: datetime) -> tuple[str, datetime | None]:
    """('unknown' | 'hold' | 'reschedule' | 'expire' | 'purge', the new expiry for 'reschedule')."""
    if tenant is None:
        return "unknown", None
    if tenant.legal_hold:
        return "hold", None
    if candidate.reason(now) is SweepReason.PURGED:
        return "purge", None
    # Expiry is re-derived from the tenant's policy today, so an upgrade or a longer enterprise retention counts.
    expires_at = expiry_for(tenant, candidate.updated_at)
    if expires_at is None or expires_at > now:
        return "reschedule", expires_at
    return "expire", None


def _audit(candidate: SweepCandidate, action: str, now: datetime) -> AuditRecord:
    if action == "purge":
        detail = f"soft-deleted {to_iso(candidate.deleted_at)}; purge window over" if candidate.deleted_at else ""
    else:
        detail = f"inactive since {to_iso(candidate.updated_at)}; retention over"
    return AuditRecord(
        at=now,
        actor=SWEEP_ACTOR,
        action=action,
        tenant_id=candidate.tenant_id,
        conversation_id=candidate.conversation_id,
        detail=detail,
    )


def run_sweep(
    store: ConversationStore,
    tenants: TenantLookup,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    show_progress: bool = True,
) -> SweepReport:
    now = now or utc_now()
    report = SweepReport(dry_run=dry_run)
    candidates = list(store.sweep_candidates(now))
    failures_in_a_row = 0
    columns = (TextColumn("retention sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not show_progress) as progress:
        task = progress.add_task("sweep", total=len(candidates))
        for candidate in candidates:
            report.examined += 1
            progress.advance(task)
            action, new_expiry = _decide(candidate, tenants(candidate.tenant_id), now)
            if action in ("unknown", "hold") or dry_run:
                _count(report, action)
                continue
            try:
                if action == "reschedule":
                    store.reschedule(candidate.tenant_id, candidate.conversation_id, new_expiry)
                    _count(report, action)
                elif store.hard_delete(candidate.tenant_id, candidate.conversation_id, _audit(candidate, action, now)):
                    _count(report, action)
                else:
                    report.already_gone += 1
                failures_in_a_row = 0
            except StoreUnavailableError:
                report.failed += 1
                failures_in_a_row += 1
                if failures_in_a_row >= MAX_CONSECUTIVE_FAILURES:
                    break
    return report


def sweep_from_settings(settings: Settings, *, now: datetime | None = None, dry_run: bool = False) -> SweepReport:
    """The job as the CLI and the Modal schedule run it: the configured stores, progress on the console."""
    tenants = open_tenant_store(settings)
    conversations = open_conversation_store(settings)
    try:
        return run_sweep(conversations, tenants.get_tenant, now=now, dry_run=dry_run)
    finally:
        conversations.close()
        tenants.close()

"""The retention sweep: delete expired and purge-due conversations from every store, with an audit record each and
their answer feedback, safety audit records past their tier's retention, and feedback whose conversation is gone.

Idempotent and resumable: every deletion removes the record last, so an interrupted run leaves the record due and
the next run finishes it. DynamoDB TTL is only a backstop; reads already hide expired records. A tenant under legal
hold, or one the tenant store does not know (its hold cannot be checked), keeps everything.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from pydantic import BaseModel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from functions.accounts.retention import expiry_for
from functions.files.backends import open_file_backends
from functions.files.tenant_data import TenantFiles
from shared.settings import FilesSettings, Settings
from shared.storage.accounts import Tenant
from shared.storage.conversations import (
    AuditRecord,
    ConversationStore,
    StoreUnavailableError,
    SweepCandidate,
    SweepReason,
)
from shared.storage.factory import (
    open_conversation_store,
    open_feedback_store,
    open_safety_audit,
    open_share_store,
    open_tenant_store,
)
from shared.storage.feedback import FeedbackStore
from shared.storage.safety_audit import SafetyAuditStore
from shared.storage.shares import ShareStore
from shared.storage.timestamps import to_iso, utc_now

SWEEP_ACTOR = "retention-sweep"
# Give up on a run after this many store failures in a row (the store is down; the next run resumes).
MAX_CONSECUTIVE_FAILURES = 5
# Safety audit records are deleted this many per store call, and at most SAFETY_AUDIT_MAX_PER_RUN per run (a backlog
# is finished by the next runs); a dry run counts up to the same maximum.
SAFETY_AUDIT_BATCH = 1000
SAFETY_AUDIT_MAX_PER_RUN = 100_000

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
    safety_audit_deleted: int = 0  # safety audit records past retention (a dry run: that would be deleted)
    feedback_deleted: int = 0  # ratings of the deleted conversations' answers (a dry run: that would be deleted)
    feedback_orphans_deleted: int = 0  # ratings whose conversation was already gone (DynamoDB's TTL backstop)
    shares_deleted: int = 0  # share links of the deleted conversations (shared/storage/shares.py)
    files_deleted: int = 0  # uploaded files past the tenant's retention, with their vectors (docs/files.md)
    vector_stores_deleted: int = 0  # vector stores inactive past retention or their own expires_after
    orphan_bodies_deleted: int = 0  # file bodies with no metadata, past the grace age (a crash between put and insert)
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


def _holds(tenants: TenantLookup) -> Callable[[str], bool]:
    """Whether a tenant's records must be kept (legal hold, or an unknown tenant); one lookup per tenant per run."""
    held: dict[str, bool] = {}

    def is_held(tenant_id: str) -> bool:
        if tenant_id not in held:
            tenant = tenants(tenant_id)
            held[tenant_id] = tenant is None or tenant.legal_hold
        return held[tenant_id]

    return is_held


def _sweep_safety_audit(
    store: SafetyAuditStore, tenants: TenantLookup, now: datetime, report: SweepReport, progress: Progress
) -> None:
    task = progress.add_task("safety audit", total=None)
    is_held = _holds(tenants)
    try:
        if report.dry_run:
            report.safety_audit_deleted = store.count_due(now, is_held, limit=SAFETY_AUDIT_MAX_PER_RUN)
            return
        while report.safety_audit_deleted < SAFETY_AUDIT_MAX_PER_RUN:
            batch = min(SAFETY_AUDIT_BATCH, SAFETY_AUDIT_MAX_PER_RUN - report.safety_audit_deleted)
            deleted = store.sweep(now, is_held, limit=batch)
            report.safety_audit_deleted += deleted
            progress.advance(task, deleted)
            if deleted < batch:
                return
    except StoreUnavailableError:  # the audit or tenant store is down: the next run resumes
        report.failed += 1
    finally:
        progress.update(task, total=report.safety_audit_deleted, completed=report.safety_audit_deleted)


def run_sweep(
    store: ConversationStore,
    tenants: TenantLookup,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    show_progress: bool = True,
    safety_audit: SafetyAuditStore | None = None,
    feedback: FeedbackStore | None = None,
    files: TenantFiles | None = None,
    shares: ShareStore | None = None,
    orphan_grace: timedelta = timedelta(seconds=FilesSettings.model_fields["orphan_grace_s"].default),
) -> SweepReport:
    now = now or utc_now()
    report = SweepReport(dry_run=dry_run)
    candidates = list(store.sweep_candidates(now))
    failures_in_a_row = 0
    columns = (
        TextColumn("retention sweep: {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, disable=not show_progress) as progress:
        if safety_audit is not None:
            _sweep_safety_audit(safety_audit, tenants, now, report, progress)
        task = progress.add_task("conversations", total=len(candidates))
        for candidate in candidates:
            report.examined += 1
            progress.advance(task)
            action, new_expiry = _decide(candidate, tenants(candidate.tenant_id), now)
            if action in ("unknown", "hold") or dry_run:
                _count(report, action)
                if dry_run and action in ("expire", "purge") and feedback is not None:
                    report.feedback_deleted += _feedback_of(feedback, candidate, report)
                continue
            try:
                if action == "reschedule":
                    store.reschedule(candidate.tenant_id, candidate.conversation_id, new_expiry)
                    _count(report, action)
                    failures_in_a_row = 0
                    continue
                if feedback is not None:  # before the record: a run stopped in between leaves the record due
                    report.feedback_deleted += feedback.delete_conversation(
                        candidate.tenant_id, candidate.conversation_id
                    )
                if shares is not None:  # the same: copies of its content go first
                    report.shares_deleted += shares.delete_conversation(candidate.tenant_id, candidate.conversation_id)
                if store.hard_delete(candidate.tenant_id, candidate.conversation_id, _audit(candidate, action, now)):
                    _count(report, action)
                else:
                    report.already_gone += 1
                failures_in_a_row = 0
            except StoreUnavailableError:
                report.failed += 1
                failures_in_a_row += 1
                if failures_in_a_row >= MAX_CONSECUTIVE_FAILURES:
                    break
        if feedback is not None:
            _sweep_orphaned_feedback(feedback, store, tenants, report, progress)
        if files is not None:
            _sweep_files(files, tenants, now, orphan_grace, report, progress)
    return report


def _sweep_files(
    files: TenantFiles, tenants: TenantLookup, now: datetime, grace: timedelta, report: SweepReport, progress: Progress
) -> None:
    task = progress.add_task("files and vector stores", total=None)
    try:
        swept = files.sweep(tenants, now, dry_run=report.dry_run)
        report.files_deleted, report.vector_stores_deleted = swept.files_deleted, swept.vector_stores_deleted
        report.orphan_bodies_deleted = files.sweep_orphans(tenants, now, grace, dry_run=report.dry_run)
    except StoreUnavailableError:  # the next run resumes
        report.failed += 1
    finally:
        progress.update(task, total=report.files_deleted, completed=report.files_deleted)


def _feedback_of(feedback: FeedbackStore, candidate: SweepCandidate, report: SweepReport) -> int:
    """How many ratings deleting the candidate would take along (a dry run's count)."""
    try:
        return len(feedback.list_conversation(candidate.tenant_id, candidate.conversation_id))
    except StoreUnavailableError:
        report.failed += 1
        return 0


def _sweep_orphaned_feedback(
    feedback: FeedbackStore,
    store: ConversationStore,
    tenants: TenantLookup,
    report: SweepReport,
    progress: Progress,
) -> None:
    """Delete the feedback whose conversation record is gone without the sweep (on DynamoDB, its TTL backstop
    removes a record the sweep missed for a week): nothing else would ever remove it. Held tenants keep theirs."""
    is_held = _holds(tenants)
    task = progress.add_task("orphaned feedback", total=None)
    try:
        for tenant_id in feedback.tenants():
            if is_held(tenant_id):
                continue
            conversation_ids = dict.fromkeys(record.conversation_id for record in feedback.list_tenant(tenant_id))
            for conversation_id in conversation_ids:
                progress.advance(task)
                if store.is_stored(tenant_id, conversation_id):
                    continue
                if report.dry_run:
                    report.feedback_orphans_deleted += len(feedback.list_conversation(tenant_id, conversation_id))
                else:
                    report.feedback_orphans_deleted += feedback.delete_conversation(tenant_id, conversation_id)
    except StoreUnavailableError:  # the next run resumes
        report.failed += 1


def sweep_from_settings(settings: Settings, *, now: datetime | None = None, dry_run: bool = False) -> SweepReport:
    """The job as the CLI and the Modal schedule run it: the configured stores, progress on the console."""
    tenants = open_tenant_store(settings)
    conversations = open_conversation_store(settings)
    safety_audit = open_safety_audit(settings)
    feedback = open_feedback_store(settings)
    shares = open_share_store(settings)
    file_backends = open_file_backends(settings)
    try:
        return run_sweep(
            conversations, tenants.get_tenant, now=now, dry_run=dry_run, safety_audit=safety_audit, feedback=feedback,
            files=TenantFiles(file_backends), shares=shares,
            orphan_grace=timedelta(seconds=settings.files.orphan_grace_s),
        )  # fmt: skip
    finally:
        shares.close()
        file_backends.close()
        feedback.close()
        safety_audit.close()
        conversations.close()
        tenants.close()

"""The retention sweep against both stores: tier expiry, enterprise retention, legal hold, purge, resume, dry run."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from functions.accounts.retention import expiry_for
from functions.jobs import retention_sweep
from functions.jobs.retention_sweep import SWEEP_ACTOR, run_sweep
from shared.fleet.tables import safety_for
from shared.fleet.tiers import Tier
from shared.storage.accounts import Tenant
from shared.storage.conversations import ConversationStore, StoredMessage, StoreUnavailableError, new_conversation_id
from shared.storage.safety_audit import SafetyAuditStore
from shared.storage.sqlite.accounts import SQLiteStore
from shared.storage.sqlite.conversations import SQLiteConversationStore
from shared.storage.sqlite.safety_audit import SQLiteSafetyAudit
from tests.storage.contracts.test_safety_audit_contract import audit

T0 = datetime(2026, 6, 1, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[3]


def tenant(name: str, tier: Tier, **kwargs) -> Tenant:
    return Tenant(id=f"ten_{name}", name=name, tier=tier, created_at=T0, **kwargs)


def chat(store: ConversationStore, owner: Tenant, at: datetime = T0) -> str:
    conversation_id = new_conversation_id()
    store.append_turn(
        owner.id,
        conversation_id,
        expected_version=0,
        messages=[StoredMessage(role="user", content="secret plans", created_at=at)],
        expires_at=expiry_for(owner, at),
        render_version=1,
        now=at,
    )
    return conversation_id


def test_sweep_applies_each_tiers_retention(conversation_store: ConversationStore) -> None:
    free, plus = tenant("free", Tier.FREE), tenant("plus", Tier.PLUS)
    enterprise = tenant("corp", Tier.ENTERPRISE, retention_days=365)
    forever = tenant("forever", Tier.ENTERPRISE)
    tenants = {t.id: t for t in (free, plus, enterprise, forever)}
    ids = {t.id: chat(conversation_store, t) for t in tenants.values()}
    now = T0 + timedelta(days=31)

    report = run_sweep(conversation_store, tenants.get, now=now, show_progress=False)
    assert (report.examined, report.expired) == (1, 1)
    assert conversation_store.get(free.id, ids[free.id], now=T0) is None, "gone from the store, not only hidden"
    for kept in (plus, enterprise, forever):
        assert conversation_store.get(kept.id, ids[kept.id], now=now) is not None
    audit = conversation_store.audit_log()[0]
    assert (audit.actor, audit.action, audit.conversation_id) == (SWEEP_ACTOR, "expire", ids[free.id])
    assert "secret" not in audit.model_dump_json()

    late = T0 + timedelta(days=366)
    report = run_sweep(conversation_store, tenants.get, now=late, show_progress=False)
    assert report.expired == 2  # plus after 90 days, enterprise after its own 365
    assert conversation_store.get(forever.id, ids[forever.id], now=late) is not None

    again = run_sweep(conversation_store, tenants.get, now=late, show_progress=False)
    assert again.examined == 0, "a second run finds nothing left to do"


def test_legal_hold_is_never_swept(conversation_store: ConversationStore) -> None:
    corp = tenant("corp", Tier.ENTERPRISE, retention_days=30)
    expiring, deleted = chat(conversation_store, corp), chat(conversation_store, corp)
    conversation_store.soft_delete(corp.id, deleted, now=T0)
    held = corp.model_copy(update={"legal_hold": True})
    report = run_sweep(conversation_store, {corp.id: held}.get, now=T0 + timedelta(days=400), show_progress=False)
    assert (report.held, report.expired, report.purged) == (2, 0, 0)
    assert conversation_store.get(corp.id, expiring, now=T0) is not None
    assert conversation_store.audit_log() == []


def test_an_upgrade_extends_expiry_instead_of_deleting(conversation_store: ConversationStore) -> None:
    was_free = tenant("upgraded", Tier.FREE)
    conversation_id = chat(conversation_store, was_free)
    now_plus = was_free.model_copy(update={"tier": Tier.PLUS})
    now = T0 + timedelta(days=31)
    report = run_sweep(conversation_store, {was_free.id: now_plus}.get, now=now, show_progress=False)
    assert (report.rescheduled, report.expired) == (1, 0)
    kept = conversation_store.get(was_free.id, conversation_id, now=now)
    assert kept is not None and kept.expires_at == T0 + timedelta(days=90)


def test_soft_deleted_conversations_are_purged_after_30_days(conversation_store: ConversationStore) -> None:
    plus = tenant("plus", Tier.PLUS)
    conversation_id = chat(conversation_store, plus)
    conversation_store.soft_delete(plus.id, conversation_id, now=T0 + timedelta(days=1))
    early = run_sweep(conversation_store, {plus.id: plus}.get, now=T0 + timedelta(days=30), show_progress=False)
    assert early.examined == 0
    report = run_sweep(conversation_store, {plus.id: plus}.get, now=T0 + timedelta(days=32), show_progress=False)
    assert report.purged == 1 and conversation_store.audit_log()[0].action == "purge"


def test_unknown_tenants_and_dry_runs_change_nothing(conversation_store: ConversationStore) -> None:
    free = tenant("free", Tier.FREE)
    conversation_id = chat(conversation_store, free)
    now = T0 + timedelta(days=31)
    assert run_sweep(conversation_store, {}.get, now=now, show_progress=False).unknown_tenant == 1
    dry = run_sweep(conversation_store, {free.id: free}.get, now=now, dry_run=True, show_progress=False)
    assert dry.expired == 1
    assert [c.conversation_id for c in conversation_store.sweep_candidates(now)] == [conversation_id]


class FlakyStore:
    """Fails the first `failures` hard deletes as an unreachable store would."""

    def __init__(self, inner: ConversationStore, failures: int) -> None:
        self.inner, self.failures = inner, failures

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def hard_delete(self, *args, **kwargs) -> bool:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailableError()
        return self.inner.hard_delete(*args, **kwargs)


def test_an_interrupted_sweep_is_finished_by_the_next_run(conversation_store: ConversationStore) -> None:
    free = tenant("free", Tier.FREE)
    ids = [chat(conversation_store, free) for _ in range(3)]
    now = T0 + timedelta(days=31)
    first = run_sweep(FlakyStore(conversation_store, failures=2), {free.id: free}.get, now=now, show_progress=False)  # type: ignore[arg-type]
    assert (first.failed, first.expired) == (2, 1)
    second = run_sweep(conversation_store, {free.id: free}.get, now=now, show_progress=False)
    assert second.expired == 2
    assert all(conversation_store.get(free.id, i, now=T0) is None for i in ids)
    assert sorted(a.conversation_id for a in conversation_store.audit_log()) == sorted(ids)


def blocked(store: SafetyAuditStore, owner: Tenant, request_id: str, at: datetime = T0) -> None:
    """A safety audit record as the pipeline writes it: kept for the owner's tier's audit retention."""
    days = safety_for(owner.tier, owner.safety).audit_retention_days
    assert store.record(audit(request_id, tenant=owner.id, at=at, expires_at=at + timedelta(days=days)))


def audited(store: SafetyAuditStore, owner: Tenant) -> list[str]:
    return [r.request_id for r in store.list_for_tenant(owner.id, T0 - timedelta(days=1), T0 + timedelta(days=999))]


@pytest.fixture
def no_conversations(tmp_path: Path):
    store = SQLiteConversationStore(tmp_path / "conversations.db")
    yield store
    store.close()


def test_sweep_deletes_safety_audit_records_past_each_tiers_retention(
    safety_audit: SafetyAuditStore, no_conversations: ConversationStore
) -> None:
    free, plus, corp = tenant("free", Tier.FREE), tenant("plus", Tier.PLUS), tenant("corp", Tier.ENTERPRISE)
    held = tenant("held", Tier.FREE, legal_hold=True)
    stranger = tenant("stranger", Tier.FREE)  # not in the tenant store: its hold cannot be checked
    for owner in (free, plus, corp, held, stranger):
        blocked(safety_audit, owner, f"req_{owner.name}")
    safety_audit.record(audit("req_kept", tenant=free.id, expires_at=None))
    tenants = {t.id: t for t in (free, plus, corp, held)}

    def sweep(days: int, **kwargs) -> int:
        now = T0 + timedelta(days=days)
        report = run_sweep(no_conversations, tenants.get, now=now, show_progress=False, safety_audit=safety_audit,
                           **kwargs)  # fmt: skip
        assert report.failed == 0
        return report.safety_audit_deleted

    assert sweep(29) == 0
    assert sweep(30, dry_run=True) == 1
    assert audited(safety_audit, free) == ["req_kept", "req_free"]  # the dry run changed nothing
    assert sweep(30) == 1
    assert audited(safety_audit, free) == ["req_kept"]
    assert sweep(30) == 0  # idempotent
    assert sweep(90) == 1 and audited(safety_audit, plus) == []
    assert sweep(400) == 1 and audited(safety_audit, corp) == []
    assert audited(safety_audit, held) == ["req_held"] and audited(safety_audit, stranger) == ["req_stranger"]
    tenants[held.id] = held.model_copy(update={"legal_hold": False})
    assert sweep(400) == 1 and audited(safety_audit, held) == []


def test_a_safety_audit_backlog_is_swept_in_batches(
    safety_audit: SafetyAuditStore, no_conversations: ConversationStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention_sweep, "SAFETY_AUDIT_BATCH", 2)
    monkeypatch.setattr(retention_sweep, "SAFETY_AUDIT_MAX_PER_RUN", 5)
    free = tenant("free", Tier.FREE)
    for i in range(7):
        blocked(safety_audit, free, f"req_{i}", at=T0 + timedelta(minutes=i))
    now = T0 + timedelta(days=31)
    dry = run_sweep(no_conversations, {free.id: free}.get, now=now, dry_run=True, show_progress=False,
                    safety_audit=safety_audit)  # fmt: skip
    assert dry.safety_audit_deleted == 5  # counted up to what one run would delete
    first = run_sweep(no_conversations, {free.id: free}.get, now=now, show_progress=False, safety_audit=safety_audit)
    assert first.safety_audit_deleted == 5  # at most the run's maximum
    second = run_sweep(no_conversations, {free.id: free}.get, now=now, show_progress=False, safety_audit=safety_audit)
    assert second.safety_audit_deleted == 2 and audited(safety_audit, free) == []


class DownSafetyAudit:
    def __getattr__(self, name: str):
        def unavailable(*args, **kwargs):
            raise StoreUnavailableError()

        return unavailable


def test_an_unavailable_safety_audit_store_fails_the_run_but_not_the_conversations(
    conversation_store: ConversationStore,
) -> None:
    free = tenant("free", Tier.FREE)
    chat(conversation_store, free)
    report = run_sweep(conversation_store, {free.id: free}.get, now=T0 + timedelta(days=31), show_progress=False,
                       safety_audit=DownSafetyAudit())  # type: ignore[arg-type]  # fmt: skip
    assert (report.expired, report.failed, report.safety_audit_deleted) == (1, 1, 0)


def test_fleetchat_sweep_cli(tmp_path: Path) -> None:
    tenants = SQLiteStore(tmp_path / "fleetchat.db")
    free = tenants.create_tenant("free", Tier.FREE)
    tenants.close()
    conversations = SQLiteConversationStore(tmp_path / "fleetchat.db")
    conversation_id = chat(conversations, free, at=T0)
    conversations.close()
    safety_audit = SQLiteSafetyAudit(tmp_path / "fleetchat.db")
    blocked(safety_audit, free, "req_blocked")

    def sweep(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "functions.cli", "sweep", "--data-dir", str(tmp_path), *args]
        return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)

    dry = sweep("--dry-run", "--as-of", (T0 + timedelta(days=31)).isoformat())
    assert dry.returncode == 0 and "dry run" in dry.stdout
    assert audited(safety_audit, free) == ["req_blocked"]
    done = sweep("--as-of", (T0 + timedelta(days=31)).isoformat())
    assert done.returncode == 0, done.stderr
    assert audited(safety_audit, free) == []
    safety_audit.close()
    assert any(line.split() == ["│", "expired", "│", "1", "│"] for line in done.stdout.splitlines()), done.stdout
    conversations = SQLiteConversationStore(tmp_path / "fleetchat.db")
    assert conversations.get(free.id, conversation_id, now=T0) is None
    conversations.close()


def test_fleetchat_retention_cli_sets_a_tenants_policy(tmp_path: Path) -> None:
    tenants = SQLiteStore(tmp_path / "fleetchat.db")
    corp = tenants.create_tenant("corp", Tier.ENTERPRISE)
    command = [sys.executable, "-m", "functions.cli", "retention", corp.id, "--days", "400", "--legal-hold"]
    done = subprocess.run([*command, "--data-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    updated = tenants.get_tenant(corp.id)
    assert updated is not None and (updated.retention_days, updated.legal_hold) == (400, True)
    missing = subprocess.run(
        [sys.executable, "-m", "functions.cli", "retention", "ten_nobody", "--data-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1 and "no tenant" in missing.stderr
    tenants.close()

"""SQLite-only behaviour of the safety tables: migration 4 on an existing database, and the indexes each query uses."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from shared.fleet.tiers import SafetyOverrides
from shared.storage.accounts import TenantChanges
from shared.storage.sqlite.accounts import SQLiteStore
from shared.storage.sqlite.db import MIGRATIONS
from shared.storage.sqlite.safety_audit import SQLiteSafetyAudit
from tests.storage.contracts.test_safety_audit_contract import T0, audit


def _database_at(path: Path, version: int) -> None:
    """A database as a release with the first `version` migrations left it."""
    db = sqlite3.connect(path)
    for statements in MIGRATIONS[:version]:
        for statement in statements:
            db.execute(statement)
    db.execute(
        "INSERT INTO tenants (id, name, tier, created_at, limits) VALUES (?, ?, ?, ?, ?)",
        ("ten_old", "old", "enterprise", datetime(2026, 1, 1, tzinfo=UTC).isoformat(), '{"key_rpm":7}'),
    )
    db.execute(f"PRAGMA user_version={version}")
    db.commit()
    db.close()


def test_migration_4_adds_safety_to_an_existing_database(tmp_path: Path) -> None:
    path = tmp_path / "fleetchat.db"
    _database_at(path, 3)
    store = SQLiteStore(path)
    assert store.schema_version == len(MIGRATIONS)
    old = store.get_tenant("ten_old")
    assert old is not None and old.safety is None and old.limits is not None and old.limits.key_rpm == 7
    overrides = SafetyOverrides(block_outbound_pii=True)
    updated = store.update_tenant("ten_old", TenantChanges(safety=overrides))
    assert updated is not None and updated.safety == overrides
    store.close()
    audit_store = SQLiteSafetyAudit(path)
    assert audit_store.record(audit("req_1", tenant="ten_old"))
    audit_store.close()
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT safety FROM tenants").fetchone() == ('{"block_outbound_pii":true}',)
    raw.close()


def _plans(path: Path, statements: list[str]) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [" | ".join(row[-1] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}")) for sql in statements]
    finally:
        db.close()


def test_listing_and_sweep_read_through_their_indexes(tmp_path: Path) -> None:
    path = tmp_path / "fleetchat.db"
    store = SQLiteSafetyAudit(path)
    store.record(audit("req_1", expires_at=T0 + timedelta(days=1)))
    statements: list[str] = []
    store._database._db.set_trace_callback(statements.append)  # the SQL as run, parameters bound
    store.list_for_tenant("ten_a", T0, T0 + timedelta(days=1))
    store.count_due(T0 + timedelta(days=2), lambda tenant: False)
    store.close()
    listing, due = _plans(path, [sql for sql in statements if sql.startswith("SELECT")])
    assert "safety_audit_by_tenant" in listing and "TEMP B-TREE" not in listing
    assert "safety_audit_by_expiry" in due and "TEMP B-TREE" not in due  # never a row that is not due

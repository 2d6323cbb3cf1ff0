"""The ledger writer loses nothing while the store is down: entries spool to a local file and replay, exactly once."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from functions.spooled_writer import LedgerWriter
from shared.storage.ledger import LedgerEntry, Outcome
from shared.storage.sqlite.ledger import SQLiteLedger

T0 = datetime(2026, 11, 22, 10, tzinfo=UTC)


def _entry(request_id: str) -> LedgerEntry:
    return LedgerEntry(
        request_id=request_id, tenant_id="ten_a", key_id="key_a", model="mini", prompt_tokens=10,
        completion_tokens=5, cached_tokens=0, outcome=Outcome.COMPLETED, created_at=T0,
    )  # fmt: skip


@contextmanager
def write_lock_held(path: Path) -> Iterator[None]:
    """Another process's writer holding the database's write lock."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


def _requests(ledger: SQLiteLedger) -> int:
    return sum(t.requests for t in ledger.totals(T0 - timedelta(days=1), T0 + timedelta(days=1)))


def test_entries_written_while_the_store_is_locked_are_spooled_then_replayed(tmp_path: Path) -> None:
    ledger = SQLiteLedger(tmp_path / "fleetchat.db", busy_timeout_s=0.05)
    writer = LedgerWriter(ledger, tmp_path / "ledger-spool.jsonl")
    assert writer.record(_entry("req_1"))
    with write_lock_held(tmp_path / "fleetchat.db"):
        assert not writer.record(_entry("req_2"))
        assert not writer.record(_entry("req_3"))
        assert writer.replay() == 0  # still down: the spool is kept
    assert len((tmp_path / "ledger-spool.jsonl").read_text().splitlines()) == 2
    assert _requests(ledger) == 1
    assert writer.record(_entry("req_4"))  # the next good write replays the spool
    assert _requests(ledger) == 4
    assert (tmp_path / "ledger-spool.jsonl").read_text() == ""
    assert writer.replay() == 0 and _requests(ledger) == 4  # nothing counted twice
    ledger.close()


def test_a_spool_left_by_a_crashed_process_is_replayed_once(tmp_path: Path) -> None:
    spool = tmp_path / "ledger-spool.jsonl"
    spool.write_text(_entry("req_1").model_dump_json() + "\n" + _entry("req_1").model_dump_json() + "\n")
    ledger = SQLiteLedger(tmp_path / "fleetchat.db")
    writer = LedgerWriter(ledger, spool)
    assert writer.replay() == 2
    assert _requests(ledger) == 1  # idempotent by request id
    ledger.close()

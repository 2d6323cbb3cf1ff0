"""The local default key: a 0600 file, only its hash in the store, stable across restarts."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

from functions.local_stack.local_tenant import ensure_local_key
from shared.api_keys import hash_api_key
from shared.fleet.tiers import Tier
from shared.storage.sqlite.accounts import SQLiteStore
from shared.storage.sqlite.db import MIGRATIONS


def test_key_file_is_private_and_store_keeps_only_the_hash(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "db.sqlite")
    key = ensure_local_key(store, tmp_path / "local_api_key", Tier.PLUS)
    mode = stat.S_IMODE((tmp_path / "local_api_key").stat().st_mode)
    assert mode == 0o600
    dump = "\n".join(sqlite3.connect(tmp_path / "db.sqlite").iterdump())
    assert key not in dump
    assert hash_api_key(key) in dump
    store.close()


def test_restart_reuses_the_key_and_a_tampered_file_gets_a_new_one(tmp_path: Path) -> None:
    path = tmp_path / "local_api_key"
    store = SQLiteStore(tmp_path / "db.sqlite")
    key = ensure_local_key(store, path, Tier.PLUS)
    store.close()
    store = SQLiteStore(tmp_path / "db.sqlite")  # a restart
    assert ensure_local_key(store, path, Tier.PLUS) == key
    path.write_text("fc-someone-elses-key\n")
    fresh = ensure_local_key(store, path, Tier.PLUS)
    assert fresh != key and store.find_key(hash_api_key(fresh)) is not None
    store.close()


def test_schema_is_versioned_and_migrations_are_idempotent(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "db.sqlite")
    assert store.schema_version == len(MIGRATIONS)
    store.close()
    again = SQLiteStore(tmp_path / "db.sqlite")
    assert again.schema_version == len(MIGRATIONS)
    assert sqlite3.connect(tmp_path / "db.sqlite").execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again.close()

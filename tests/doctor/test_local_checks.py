"""Local checks against real temp data dirs and web builds: a good one passes, broken ones fail with their fix."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from functions.local_stack.doctor.results import Status
from shared.storage.sqlite.db import MIGRATIONS
from tests.doctor.conftest import only, run, statuses

LOCAL_ONLY = ("workers", "stripe")


def test_a_fresh_data_dir_is_created_migrated_and_writable(tmp_path: Path, web_dist: Path) -> None:
    data_dir = tmp_path / "new" / "data"
    report = run(skip=LOCAL_ONLY, data_dir=data_dir, web_dist_dir=web_dist)
    assert not report.failed, report.results
    (sqlite,) = only(report, "stores", "sqlite")
    assert f"schema {len(MIGRATIONS)}/{len(MIGRATIONS)}" in sqlite.detail
    with sqlite3.connect(data_dir / "fleetchat.db") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        assert not db.execute("SELECT name FROM sqlite_master WHERE name = 'doctor_probe'").fetchall()
    assert not list(data_dir.glob(".doctor-*"))  # the write probe leaves nothing behind
    (web,) = only(report, "web")
    assert web.status is Status.OK and "3 referenced file(s)" in web.detail


def test_a_data_dir_that_cannot_be_created_fails_with_the_fix(tmp_path: Path, web_dist: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    report = run(skip=LOCAL_ONLY, data_dir=blocker / "data", web_dist_dir=web_dist)
    assert report.failed
    (data_dir,) = only(report, "stores", "data dir")
    assert data_dir.status is Status.FAIL and "FLEETCHAT_DATA_DIR" in (data_dir.hint or "")
    assert data_dir.line().startswith("✗ stores: data dir:")


def test_a_database_that_cannot_be_opened_fails(tmp_path: Path, web_dist: Path) -> None:
    (tmp_path / "fleetchat.db").mkdir()  # something that is not a database file stands where the file should be
    report = run(skip=LOCAL_ONLY, data_dir=tmp_path, web_dist_dir=web_dist)
    (sqlite,) = only(report, "stores", "sqlite")
    assert sqlite.status is Status.FAIL and "cannot open" in sqlite.detail and sqlite.hint


def test_a_database_from_newer_code_fails_and_is_left_alone(tmp_path: Path, web_dist: Path) -> None:
    newer = len(MIGRATIONS) + 3
    with sqlite3.connect(tmp_path / "fleetchat.db") as db:
        db.execute(f"PRAGMA user_version={newer}")
    report = run(skip=LOCAL_ONLY, data_dir=tmp_path, web_dist_dir=web_dist)
    (sqlite,) = only(report, "stores", "sqlite")
    assert sqlite.status is Status.FAIL and f"schema {newer}" in sqlite.detail
    with sqlite3.connect(tmp_path / "fleetchat.db") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == newer


def test_a_missing_web_build_fails_with_the_build_command(tmp_path: Path) -> None:
    report = run(skip=LOCAL_ONLY, data_dir=tmp_path / "data", web_dist_dir=tmp_path / "no-dist")
    (web,) = only(report, "web")
    assert web.status is Status.FAIL and "npm run build" in (web.hint or "")
    assert report.failed


def test_a_build_missing_an_asset_it_loads_fails(tmp_path: Path, web_dist: Path) -> None:
    (web_dist / "assets" / "index-4f2a.js").unlink()
    (web,) = only(run(skip=LOCAL_ONLY, data_dir=tmp_path / "data", web_dist_dir=web_dist), "web")
    assert web.status is Status.FAIL and "/assets/index-4f2a.js" in web.detail


def test_the_unbuilt_source_page_is_not_a_build(tmp_path: Path) -> None:
    source = Path(__file__).resolve().parents[2] / "web"  # web/index.html loads /src/main.tsx
    (web,) = only(run(skip=LOCAL_ONLY, data_dir=tmp_path / "data", web_dist_dir=source), "web")
    assert web.status is Status.FAIL and "unbuilt" in web.detail


def test_tier_default_pools_without_workers_fail_the_config(tmp_path: Path, web_dist: Path) -> None:
    report = run(skip=LOCAL_ONLY, data_dir=tmp_path / "data", web_dist_dir=web_dist, pools=["mini"])
    tiers = {r.name: r for r in only(report, "config", "tier ")}
    assert tiers["tier free"].status is Status.OK
    assert tiers["tier plus"].status is Status.FAIL and "flagship" in tiers["tier plus"].detail
    assert statuses(only(report, "config", "pools")) == {Status.OK}


def test_an_unknown_pool_and_invalid_settings_fail(tmp_path: Path, web_dist: Path) -> None:
    report = run(skip=LOCAL_ONLY, data_dir=tmp_path / "data", web_dist_dir=web_dist, pools=["mini", "gpt-9"])
    (pools,) = only(report, "config", "pools")
    assert pools.status is Status.FAIL and "gpt-9" in pools.detail
    broken = run(data_dir=tmp_path / "data", replicas_per_pool=0)
    (settings,) = broken.results  # nothing else can be read from settings that do not validate
    assert settings.status is Status.FAIL and settings.detail.startswith("replicas_per_pool")
    assert "FLEETCHAT_REPLICAS_PER_POOL" in (settings.hint or "")

"""The gateway's reload of a changed operator config file (functions/control/config_watch.py), on real files: tiers and
prices apply, start-only sections are announced for the restart, a bad file leaves the last good config in force."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from functions.control.config_watch import Reloader
from shared.fleet.tables import BUILTIN_FILE, limits_for, tables
from shared.fleet.tiers import Tier
from shared.operator_config import builtin_config, install, load_config
from tests.support.operator_file import shipped_text

SHIPPED = BUILTIN_FILE  # the built-in tables; shipped_text() adds the settings-level sections


@pytest.fixture
def reloader(tmp_path: Path) -> Iterator[Reloader]:
    path = tmp_path / "fleetchat.yaml"
    path.write_text(shipped_text())
    yield Reloader(path, load_config(path))
    install(builtin_config())


def edit(reloader: Reloader, old: str, new: str) -> None:
    text = reloader.path.read_text()
    assert old in text
    reloader.path.write_text(text.replace(old, new, 1))


def test_limits_and_prices_apply(reloader: Reloader, caplog: pytest.LogCaptureFixture) -> None:
    edit(reloader, "key_rpm: 300", "key_rpm: 42")
    edit(reloader, "completion_usd_per_mtok: 0.88", "completion_usd_per_mtok: 0.5")
    with caplog.at_level(logging.WARNING, "fleetchat.config"):
        assert reloader.reload()
    assert limits_for(Tier.PLUS).key_rpm == 42
    assert tables().pools["flagship"].price.completion_usd_per_mtok == 0.5
    assert "apply at the next restart" not in caplog.text


def test_start_only_sections_are_announced(reloader: Reloader, caplog: pytest.LogCaptureFixture) -> None:
    edit(reloader, "  timeout_s: 5.0", "  timeout_s: 9.0")
    edit(reloader, "      max_containers: 16", "      max_containers: 20")
    with caplog.at_level(logging.WARNING, "fleetchat.config"):
        assert reloader.reload()
    assert "config sections pools, guard changed: they apply at the next restart" in caplog.text
    assert tables().pools["flagship"].deployed.max_containers == 16  # the running gateway keeps the pools it routes to


def test_a_bad_file_keeps_the_last_good(reloader: Reloader, caplog: pytest.LogCaptureFixture) -> None:
    edit(reloader, "key_rpm: 300", "key_rpm: 42")
    assert reloader.reload()
    edit(reloader, "key_rpm: 42", "key_rpm: 0")
    with caplog.at_level(logging.ERROR, "fleetchat.config"):
        assert not reloader.reload()
    line = next(i for i, text in enumerate(reloader.path.read_text().splitlines(), 1) if "key_rpm: 0" in text)
    expected = f"the last good config stays in force: {reloader.path}:{line}: tiers.plus.limits.key_rpm"
    assert expected in caplog.text
    assert limits_for(Tier.PLUS).key_rpm == 42


def test_a_reload_swaps_one_read_only_snapshot_whole(reloader: Reloader) -> None:
    """A request that read the tables before a reload keeps one consistent view; the new view is a new snapshot, and
    no code can edit a table in place (shared/fleet/tables.py)."""
    before = tables()
    edit(reloader, "key_rpm: 300", "key_rpm: 42")
    edit(reloader, "completion_usd_per_mtok: 0.88", "completion_usd_per_mtok: 0.5")
    assert reloader.reload()
    after = tables()
    assert after is not before
    assert (
        before.tiers[Tier.PLUS].limits.key_rpm == 300 and before.pools["flagship"].price.completion_usd_per_mtok == 0.88
    )
    assert after.tiers[Tier.PLUS].limits.key_rpm == 42 and after.pools["flagship"].price.completion_usd_per_mtok == 0.5
    with pytest.raises(TypeError):
        after.tiers[Tier.FREE] = after.tiers[Tier.PLUS]  # type: ignore[index]
    with pytest.raises(TypeError):
        after.pools["flagship"] = after.pools["mini"]  # type: ignore[index]

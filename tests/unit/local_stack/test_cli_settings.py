"""`fleetchat up` and `fleetchat gateway` take what the command line gives over the environment, and the environment's
`FLEETCHAT_*` values where an option is left out (docs/operations.md: `--replicas 2` or
`FLEETCHAT_REPLICAS_PER_POOL=2`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from functions.cli import app
from shared.settings import Settings


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Settings]:
    """The settings `fleetchat up` would start the stack with (nothing is started); no `.env` is read."""
    seen: list[Settings] = []
    monkeypatch.setattr("functions.local_stack.launcher.run_local_stack", seen.append)
    monkeypatch.chdir(tmp_path)
    for name in ("FLEETCHAT_REPLICAS_PER_POOL", "FLEETCHAT_PORT", "FLEETCHAT_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    return seen


def test_up_takes_replicas_and_port_from_the_environment_when_no_option_says(
    started: list[Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETCHAT_REPLICAS_PER_POOL", "2")
    monkeypatch.setenv("FLEETCHAT_PORT", "8123")
    assert CliRunner().invoke(app, ["up"]).exit_code == 0
    assert (started[-1].replicas_per_pool, started[-1].port) == (2, 8123)


def test_up_options_win_over_the_environment(started: list[Settings], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETCHAT_REPLICAS_PER_POOL", "2")
    result = CliRunner().invoke(app, ["up", "--replicas", "3", "--port", "8200", "--data-dir", "stack"])
    assert result.exit_code == 0, result.output
    assert (started[-1].replicas_per_pool, started[-1].port, started[-1].data_dir) == (3, 8200, Path("stack"))


def test_up_without_options_or_environment_keeps_the_defaults(started: list[Settings]) -> None:
    assert CliRunner().invoke(app, ["up"]).exit_code == 0
    assert (started[-1].replicas_per_pool, started[-1].port) == (1, 8000)


def test_a_bad_replica_count_starts_nothing(started: list[Settings], monkeypatch: pytest.MonkeyPatch) -> None:
    assert CliRunner().invoke(app, ["up", "--replicas", "0"]).exit_code == 2  # typer's usage error
    monkeypatch.setenv("FLEETCHAT_REPLICAS_PER_POOL", "0")
    result = CliRunner().invoke(app, ["up"])
    assert result.exit_code == 2 and "FLEETCHAT_REPLICAS_PER_POOL" in result.output
    assert started == []


def test_gateway_serves_on_the_environments_port(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    served: list[dict[str, Any]] = []
    monkeypatch.setattr("functions.app.create_app", lambda settings: settings)
    monkeypatch.setattr("uvicorn.run", lambda app, **options: served.append(options))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLEETCHAT_PORT", "8124")
    assert CliRunner().invoke(app, ["gateway"]).exit_code == 0
    assert CliRunner().invoke(app, ["gateway", "--port", "8125"]).exit_code == 0
    assert [options["port"] for options in served] == [8124, 8125]

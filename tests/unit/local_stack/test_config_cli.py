"""`fleetchat config check FILE` and `fleetchat config show`, through the `fleetchat` command (typer's runner, in
process: a subprocess per call would re-import the whole CLI) on real files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from functions.cli import app
from shared.fleet.tables import BUILTIN_FILE
from shared.operator_config import builtin_config, install
from tests.support.operator_file import shipped_text
from tests.support.processes import REPO

SHIPPED = BUILTIN_FILE  # the built-in tables; shipped_text() adds the settings-level sections


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No FLEETCHAT_* from the caller's shell; today's tables back after `show` installed a file."""
    import os

    for name in [name for name in os.environ if name.startswith("FLEETCHAT_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(REPO)
    yield
    install(builtin_config())


def fleetchat(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def line_with(path: Path, needle: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if needle in text)


def test_check_accepts_the_shipped_file() -> None:
    code, out, err = fleetchat("config", "check", str(SHIPPED))
    assert code == 0, err
    assert "OK (3 chat pools, 0 external, 1 guard, 1 embedding; tiers free, plus, enterprise; guard embedded)" in out


def test_check_refuses_with_file_line_field_and_reason(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(shipped_text().replace("key_tpm: 40000", "key_tpm: -1", 1).replace("  fail: closed", "  fail: x"))
    code, _, err = fleetchat("config", "check", str(bad))
    assert code == 1
    tpm, fail = line_with(bad, "key_tpm: -1"), line_with(bad, "fail: x")
    assert f"{bad}:{tpm}: tiers.free.limits.key_tpm: Input should be greater than or equal to 1 (got -1)" in err
    assert f"{bad}:{fail}: guard.fail: Input should be 'closed' or 'open'" in err


def test_check_reports_a_cross_reference(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(shipped_text().replace("  pool: flagship\n", "  pool: judge-9000\n"))
    code, _, err = fleetchat("config", "check", str(bad))
    assert code == 1
    assert f"{bad}:{line_with(bad, 'judge-9000')}: judge.pool: unknown pool 'judge-9000'" in err


def test_show_is_a_valid_config_with_environment_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETCHAT_SAFETY_GUARD_TIMEOUT_S", "7.5")
    code, out, err = fleetchat("config", "show")
    assert code == 0, err
    shown = tmp_path / "shown.yaml"
    shown.write_text(out)
    assert fleetchat("config", "check", str(shown))[0] == 0
    code, out, _ = fleetchat("config", "show", "--format", "json", "--file", str(shown))
    assert json.loads(out)["guard"]["timeout_s"] == 7.5
    assert json.loads(out)["tiers"]["free"]["limits"]["key_rpm"] == 20


def test_show_reads_the_configured_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text(shipped_text().replace("key_rpm: 300", "key_rpm: 123"))
    monkeypatch.setenv("FLEETCHAT_CONFIG_FILE", str(mine))
    code, out, err = fleetchat("config", "show", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["tiers"]["plus"]["limits"]["key_rpm"] == 123

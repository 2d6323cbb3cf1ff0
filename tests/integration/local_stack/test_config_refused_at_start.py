"""A bad operator config file stops `fleetchat up` and `fleetchat gateway` at start, before any worker or port is
taken, with the file, line, field and reason of each problem."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.fleet.tables import BUILTIN_FILE
from tests.support.operator_file import shipped_text
from tests.support.processes import REPO, free_port

SHIPPED = BUILTIN_FILE  # the built-in tables; shipped_text() adds the settings-level sections


@pytest.mark.parametrize("command", ["up", "gateway"])
def test_bad_file_refuses_the_start(tmp_path: Path, command: str) -> None:
    bad = tmp_path / "fleetchat.yaml"
    bad.write_text(shipped_text().replace("  tenant_rpm: 600\n", "  tenant_rpm: 600\n      tenant_rpd: 9\n"))
    line = next(i for i, text in enumerate(bad.read_text().splitlines(), 1) if "tenant_rpd" in text)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCHAT_")}
    port = free_port()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "functions.cli",
            command,
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "data"),
        ],
        cwd=REPO,
        env={**environ, "FLEETCHAT_CONFIG_FILE": str(bad), "COLUMNS": "300"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"{bad}:{line}: tiers.plus.limits.tenant_rpd: unknown key" in done.stderr
    assert not (tmp_path / "data" / "logs").exists()  # no worker was started

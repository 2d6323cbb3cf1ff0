"""`fleetchat doctor` as an operator runs it: a subprocess, its output lines and its exit code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

from tests.doctor.conftest import build_web_dist
from tests.support.processes import free_port
from tests.support.servers import serve
from tests.support.stand_ins.stand_in import stand_in_worker

REPO_ROOT = Path(__file__).resolve().parents[2]


def doctor(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {name: value for name, value in os.environ.items() if not name.startswith("FLEETCHAT_")}
    return subprocess.run(
        [sys.executable, "-m", "functions.cli", "doctor", *args],
        cwd=cwd,  # no .env there
        env={**clean, "PYTHONPATH": str(REPO_ROOT), "PYTHONIOENCODING": "utf-8", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_healthy_local_stack_exits_0_with_a_tick_per_check(tmp_path: Path) -> None:
    dist = build_web_dist(tmp_path / "dist")
    with ExitStack() as stack:
        urls = {pool: [stack.enter_context(serve(stand_in_worker(pool, model=pool)))] for pool in ("mini", "flagship")}
        # Without bubblewrap (a laptop that has not installed it) the sandbox check fails, rightly: left out then.
        no_sandbox = ["--skip", "sandbox"] if shutil.which("bwrap") is None else []
        done = doctor(
            tmp_path,
            "--data-dir",
            str(tmp_path / "data"),
            *no_sandbox,
            FLEETCHAT_WORKER_URLS=json.dumps(urls),
            FLEETCHAT_WEB_DIST_DIR=str(dist),
        )
    assert done.returncode == 0, done.stdout + done.stderr
    *checks, summary = done.stdout.splitlines()
    assert checks and all(line.startswith("✓ ") for line in checks), checks
    groups = {line.split(":")[0][2:] for line in checks}
    assert groups == {"config", "stores", "stripe", "workers", "web"} | ({"sandbox"} if not no_sandbox else set())
    assert summary == f"{len(checks)} ok, 0 warning(s), 0 failure(s)"


def test_a_missing_build_and_a_down_worker_exit_1_with_their_fixes(tmp_path: Path) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    with serve(stand_in_worker("m", model="mini")) as mini:
        urls = {"mini": [mini], "flagship": [down]}
        done = doctor(
            tmp_path,
            "--data-dir",
            str(tmp_path / "data"),
            "--timeout",
            "2",
            "--skip",
            "sandbox",  # its own tests: tests/doctor/test_sandbox_checks.py
            FLEETCHAT_WORKER_URLS=json.dumps(urls),
            FLEETCHAT_WEB_DIST_DIR=str(tmp_path / "missing"),
        )
        as_json = doctor(
            tmp_path,
            "--json",
            "--skip",
            "workers",
            "--skip",
            "sandbox",
            "--data-dir",
            str(tmp_path / "data"),
            FLEETCHAT_WEB_DIST_DIR=str(tmp_path / "missing"),
        )
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert f"✓ workers: mini {mini}: healthy, serves mini" in lines
    (flagship,) = [line for line in lines if line.startswith(f"✗ workers: flagship {down}: unreachable")]
    assert "— fix: start it (`fleetchat up`)" in flagship
    (web,) = [line for line in lines if line.startswith("✗ web: web build:")]
    assert "npm run build" in web
    assert lines[-1].endswith("2 failure(s)")

    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["failed"] is True
    assert {r["group"] for r in report["results"]} == {"config", "stores", "stripe", "web"}
    (web_result,) = [r for r in report["results"] if r["group"] == "web"]
    assert web_result["status"] == "fail" and "npm run build" in web_result["hint"]


def test_unknown_group_and_bad_settings(tmp_path: Path) -> None:
    bogus = doctor(tmp_path, "--skip", "everything")
    assert bogus.returncode == 2 and "unknown group" in bogus.stderr
    broken = doctor(tmp_path, "--data-dir", str(tmp_path), FLEETCHAT_REPLICAS_PER_POOL="0")
    assert broken.returncode == 1
    assert broken.stdout.splitlines()[0].startswith("✗ config: settings: replicas_per_pool:")

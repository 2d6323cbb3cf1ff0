"""Fixtures for the doctor's tests: a built web dist in a temp dir, settings pointing at it, and running the checks."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

from functions.local_stack.doctor.results import CheckResult, DoctorReport, Group, Status
from functions.local_stack.doctor.runner import diagnose
from shared.settings import Settings

INDEX = """<!doctype html>
<html><head>
<link rel="icon" href="/assets/favicon.svg" />
<script type="module" crossorigin src="/assets/index-4f2a.js"></script>
<link rel="stylesheet" crossorigin href="/assets/index-9c1b.css">
</head><body><div id="app"></div></body></html>
"""


def build_web_dist(where: Path) -> Path:
    """A dist laid out as `vite build` writes it: index.html and the hashed assets it loads."""
    (where / "assets").mkdir(parents=True)
    (where / "index.html").write_text(INDEX)
    for name in ("favicon.svg", "index-4f2a.js", "index-9c1b.css"):
        (where / "assets" / name).write_text("/* built */")
    return where


@pytest.fixture
def web_dist(tmp_path: Path) -> Path:
    return build_web_dist(tmp_path / "dist")


@pytest.fixture(autouse=True)
def _no_operator_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Settings read FLEETCHAT_* and ./.env: the tests set what they check, nothing leaks in from the machine."""
    monkeypatch.chdir(tmp_path)
    for name in ("FLEETCHAT_STRIPE_API_KEY", "FLEETCHAT_WORKER_URLS", "FLEETCHAT_ENVIRONMENT", "FLEETCHAT_POOLS"):
        monkeypatch.delenv(name, raising=False)


def run(skip: Collection[Group] = (), timeout_s: float = 5.0, **settings: Any) -> DoctorReport:
    return asyncio.run(diagnose(lambda: Settings(**settings), timeout_s=timeout_s, skip=skip))


def only(report: DoctorReport, group: Group, name_start: str = "") -> list[CheckResult]:
    return [r for r in report.results if r.group == group and r.name.startswith(name_start)]


def statuses(results: list[CheckResult]) -> set[Status]:
    return {r.status for r in results}

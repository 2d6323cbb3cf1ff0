"""`fleetchat doctor`'s sandbox check: the runner probed for real here, refused with a fix where bubblewrap is missing,
and the Modal runner reported as the Modal app's to make."""

from __future__ import annotations

import shutil

import pytest

from functions.local_stack.doctor.results import Status
from functions.sandbox.bubblewrap import bwrap_works
from tests.doctor.conftest import only, run


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed (.ci/run installs it)")
def test_a_working_sandbox_says_what_holds_it() -> None:
    [check] = only(run(skip=("stores", "stripe", "workers", "web")), "sandbox")
    assert check.status is Status.OK and "seccomp filter" in check.detail and "limits by" in check.detail


def test_without_bubblewrap_the_check_fails_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    bwrap_works.cache_clear()
    try:
        [check] = only(run(skip=("stores", "stripe", "workers", "web")), "sandbox")
    finally:
        bwrap_works.cache_clear()
    assert check.status is Status.FAIL and "bubblewrap" in check.detail and "apt-get install" in (check.hint or "")


def test_the_modal_runner_is_reported_not_made() -> None:
    report = run(skip=("stores", "stripe", "workers", "web"), server_tools={"sandbox": {"runner": "modal"}})
    [check] = only(report, "sandbox")
    assert check.status is Status.OK and "Modal Sandbox" in check.detail

"""The doctor's control-state check: the local SQLite file and a real redis-server pass with their round trip, an
unreachable Redis fails with what to check, and a deployment left on SQLite is warned that its gateways share
nothing."""

from __future__ import annotations

from pathlib import Path

from functions.local_stack.doctor.results import Status
from tests.doctor.conftest import only, run
from tests.support.processes import free_port
from tests.support.redis_server import redis_server

OTHERS = ("workers", "stripe", "web", "config")


def test_the_local_sqlite_file_and_a_running_redis_pass(tmp_path: Path) -> None:
    (local,) = only(run(skip=OTHERS, data_dir=tmp_path), "stores", "control state")
    assert local.status is Status.OK and local.detail.startswith("sqlite: write, read and delete in")
    (tmp_path / "redis").mkdir()
    with redis_server(tmp_path / "redis") as url:
        report = run(skip=OTHERS, data_dir=tmp_path, control_state={"engine": "redis", "redis_url": url})
    (shared,) = only(report, "stores", "control state")
    assert shared.status is Status.OK and shared.detail.startswith("redis: write, read and delete in")


def test_an_unreachable_redis_fails_and_names_the_setting(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    report = run(skip=OTHERS, data_dir=tmp_path, control_state={"engine": "redis", "redis_url": url, "timeout_s": 0.5})
    (check,) = only(report, "stores", "control state")
    assert check.status is Status.FAIL and "FLEETCHAT_CONTROL_STATE_REDIS_URL" in (check.hint or "")


def test_a_deployment_on_sqlite_is_warned_that_its_gateways_share_nothing(tmp_path: Path) -> None:
    deployed = {
        "environment": "deployed",
        "worker_urls": {"mini": ["https://mini.example"]},
        "session_secret": "s" * 32,
    }
    (check,) = only(run(skip=OTHERS, data_dir=tmp_path, **deployed), "stores", "control state")
    assert check.status is Status.WARN and "FLEETCHAT_CONTROL_STATE_ENGINE=redis" in (check.hint or "")

"""One server-side tool run (functions/chat/server_tools/runner.py) with the real tools, a real SQLite limits store and
audit: the breaker opens after repeated failures and lets a probe through after its cool-down, quotas count per
tenant, arguments are checked, and every call (refusals included) is audited and counted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
import uuid
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

import psutil
import pytest
from prometheus_client import CollectorRegistry

from functions.chat.server_tools.context import RunContext
from functions.chat.server_tools.metrics import ServerToolMetrics
from functions.chat.server_tools.runner import ToolRunner
from functions.chat.server_tools.tools import CalculatorTool, PythonTool
from functions.sandbox.bubblewrap import BubblewrapRunner
from functions.sandbox.choice import sandbox_slots
from functions.sandbox.protocol import SandboxLimits, SandboxRun
from functions.spooled_writer import SpooledWriter
from shared.server_tool_settings import ServerToolSettings, ToolQuota
from shared.storage.sqlite.limits import SQLiteRateLimits
from shared.storage.sqlite.tool_audit import SQLiteToolAudit
from shared.storage.timestamps import utc_now
from shared.storage.tool_audit import ToolRunRecord


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _runner(tmp_path: Path, clock: Clock, **settings: object) -> tuple[ToolRunner, SQLiteToolAudit, CollectorRegistry]:
    config = ServerToolSettings(**{"python_timeout_s": 0.5, "breaker_failure_threshold": 2, "breaker_cooldown_s": 30,
                                   **settings})  # fmt: skip
    audit = SQLiteToolAudit(tmp_path / "fleetchat.db")
    writer = SpooledWriter(audit.record, ToolRunRecord, tmp_path / "spool.jsonl")
    registry = CollectorRegistry()
    slots = sandbox_slots(config.sandbox.model_copy(update={"slots_dir": tmp_path / "slots"}), None, 1.0)
    python = PythonTool(config, BubblewrapRunner(hidden=[tmp_path]), slots, None)
    tools = {"python": python, "calculator": CalculatorTool(config)}
    limits = SQLiteRateLimits(tmp_path / "fleetchat.db")
    return ToolRunner(config, tools, limits, writer, ServerToolMetrics(registry), clock=clock), audit, registry


def _context(tenant: str = "ten_a", audit_content: bool = False) -> RunContext:
    return RunContext(tenant_id=tenant, key_id="key_1", request_id="req_1", audit_content=audit_content)


def _statuses(audit: SQLiteToolAudit, tenant: str = "ten_a") -> list[str]:
    now = utc_now()
    return [r.status.value for r in reversed(audit.list_for_tenant(tenant, now - timedelta(hours=1), now))]


class BrokenRunner(BubblewrapRunner):
    """A sandbox that cannot start (the tool's own failure) until `fixed`."""

    fixed = False

    async def run(self, program: str, limits: SandboxLimits, inputs: Mapping[str, bytes] = {}) -> SandboxRun:
        if not self.fixed:
            raise OSError("bwrap: cannot create namespaces")
        return await super().run(program, limits, inputs)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed (.ci/run installs it)")
def test_the_breaker_opens_on_a_sandbox_that_keeps_failing_and_a_probe_closes_it(tmp_path: Path) -> None:
    clock = Clock()
    runner, audit, registry = _runner(tmp_path, clock)
    broken = BrokenRunner(hidden=[tmp_path])
    runner.tools["python"].runner = broken  # type: ignore[attr-defined]
    code = json.dumps({"code": "print(6 * 7)"})

    async def go() -> list:
        runs = [await runner.run(f"call_{i}", "python", code, _context()) for i in range(3)]
        clock.now += 31  # the cool-down has passed: one probe goes through
        broken.fixed = True
        runs.append(await runner.run("call_probe", "python", code, _context()))
        return runs

    first, second, refused, probe = asyncio.run(go())
    assert [first.status, second.status] == ["error", "error"] and "namespaces" in json.loads(first.content)["error"]
    assert refused.status == "breaker_open" and "paused; retry in 30 s" in json.loads(refused.content)["error"]
    assert probe.status == "ok" and json.loads(probe.content)["output"] == "42\n"
    assert _statuses(audit) == ["error", "error", "breaker_open", "ok"]
    runs = lambda status: registry.get_sample_value(  # noqa: E731
        "fleetchat_gateway_server_tool_runs_total", {"tool": "python", "status": status}
    )
    assert (runs("error"), runs("breaker_open"), runs("ok")) == (2, 1, 1)
    # refused calls are not timed
    assert registry.get_sample_value("fleetchat_gateway_server_tool_seconds_count", {"tool": "python"}) == 3


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed (.ci/run installs it)")
def test_programs_that_run_past_their_time_do_not_pause_the_tool_for_others(tmp_path: Path) -> None:
    runner, _, _ = _runner(tmp_path, Clock())
    spin = json.dumps({"code": "while True:\n    pass"})

    async def go() -> list:
        loops = [await runner.run(f"call_{i}", "python", spin, _context("ten_loops")) for i in range(3)]
        return [*loops, await runner.run("call_other", "python", json.dumps({"code": "print(1)"}), _context("ten_b"))]

    *loops, other = asyncio.run(go())
    assert [r.status for r in loops] == ["timeout"] * 3 and other.status == "ok"


def test_quotas_count_per_tenant_and_a_refusal_says_so(tmp_path: Path) -> None:
    runner, audit, _ = _runner(tmp_path, Clock(), quotas={"calculator": ToolQuota(runs=2, window_s=3600)})
    expression = json.dumps({"expression": "2 ** 8"})

    async def go() -> list:
        return [await runner.run("c", "calculator", expression, _context(tenant)) for tenant in ("a", "a", "a", "b")]

    ok1, ok2, refused, other = asyncio.run(go())
    assert json.loads(ok1.content) == {"status": "ok", "value": 256} and ok2.status == "ok"
    if refused.status != "quota":  # the hour's window turned over between the calls (once an hour, for a moment)
        pytest.skip("the quota window turned over mid-test")
    assert "quota exhausted: 2 calculator runs per 3600 s" in json.loads(refused.content)["error"]
    assert other.status == "ok"
    assert _statuses(audit, "a") == ["ok", "ok", "quota"]


def test_bad_arguments_are_explained_and_do_not_trip_the_breaker(tmp_path: Path) -> None:
    runner, _, _ = _runner(tmp_path, Clock())

    async def go() -> list:
        bad = [await runner.run("c", "calculator", text, _context()) for text in ('{"expr": "1"}', "not json", "{}")]
        return [*bad, await runner.run("c", "calculator", '{"expression": "1/0"}', _context())]

    *invalid, zero = asyncio.run(go())
    assert all(r.status == "error" and "invalid arguments" in json.loads(r.content)["error"] for r in invalid)
    assert json.loads(zero.content) == {"status": "error", "error": "division by zero"}
    assert runner.breakers["calculator"].failures == 0


def test_content_is_audited_only_where_the_policy_allows(tmp_path: Path) -> None:
    runner, audit, _ = _runner(tmp_path, Clock())
    asyncio.run(runner.run("c", "calculator", '{"expression": "3*3"}', _context("kept", audit_content=True)))
    asyncio.run(runner.run("c", "calculator", '{"expression": "3*3"}', _context("bare")))
    now = utc_now()
    [kept] = audit.list_for_tenant("kept", now - timedelta(hours=1), now)
    [bare] = audit.list_for_tenant("bare", now - timedelta(hours=1), now)
    assert kept.input == '{"expression": "3*3"}' and kept.output == '{"status": "ok", "value": 9}'
    assert bare.input is None and bare.output is None and bare.key_id == "key_1" and bare.request_id == "req_1"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed (.ci/run installs it)")
def test_a_run_cancelled_with_its_request_is_killed_and_still_audited(tmp_path: Path) -> None:
    runner, audit, _ = _runner(tmp_path, Clock(), python_timeout_s=30)
    marker = f"fleetchat-probe-{uuid.uuid4().hex}"
    code = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'while True: pass', {marker!r}], start_new_session=True)\n"
        "while True:\n    pass\n"
    )

    async def go() -> None:
        task = asyncio.create_task(runner.run("c", "python", json.dumps({"code": code}), _context()))
        deadline = time.monotonic() + 20
        while not _processes(marker) and time.monotonic() < deadline:  # the sandboxed child has started
            await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(go())
    deadline = time.monotonic() + 5  # the kernel reaps a dead PID namespace's processes asynchronously
    while _processes(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes(marker) == []
    assert _statuses(audit) == ["error"]
    assert not runner.breakers["python"].probing and runner.breakers["python"].failures == 0


def _processes(marker: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]

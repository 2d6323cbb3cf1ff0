"""`fleetchat eval safety --configured-guard`, run as the process an operator runs: the golden sets and the held-out
public sources judged by the guard the settings name, over real loopback HTTP — a scripted worker speaking Llama
Guard 3's output format, and another fleetchat gateway's `/v1/moderations` — and a guard that cannot answer stopping
the run rather than being counted."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.fleet.tiers import Tier
from tests.support.processes import free_port
from tests.support.servers import serve
from tests.support.stand_ins.fleetchat_guard import fleetchat_guard
from tests.support.stand_ins.guard_servers import llama_guard_worker


def run_eval(tmp_path: Path, **guard: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """`fleetchat eval safety --smoke --configured-guard --json FILE` with `guard` as FLEETCHAT_SAFETY_* variables."""
    report = tmp_path / "report.json"
    env = {name: value for name, value in os.environ.items() if not name.startswith("FLEETCHAT_")}
    env |= {f"FLEETCHAT_SAFETY_{name.upper()}": value for name, value in guard.items()}
    command = [sys.executable, "-m", "functions.cli", "eval", "safety", "--smoke", "--configured-guard"]
    done = subprocess.run([*command, "--json", str(report)], env=env, capture_output=True, text=True, timeout=900)
    return done, json.loads(report.read_text()) if report.exists() else None


def judged(report: dict[str, Any]) -> int:
    """Conversations the report counts: golden items, held-out items, and the requests pasted into documents."""
    cross = report["cross_source"]
    golden = sum(group["items"] for group in report["adversarial_by_category"] + report["benign_by_topic"])
    return golden + sum(source["items"] for source in cross["sources"]) + cross["buried"]["items"]


@pytest.mark.parametrize(("answer", "blocked"), [("safe", 0.0), ("unsafe\nS1", 1.0)])
def test_every_item_is_judged_by_the_configured_llama_guard(tmp_path: Path, answer: str, blocked: float) -> None:
    # A worker that answers the same verdict to everything: the numbers are its, not the embedded cascade's.
    worker = llama_guard_worker({}, default=answer)
    with serve(worker) as url:
        done, report = run_eval(
            tmp_path, guard="llama_guard", guard_url=url, guard_model="llama-guard-3-1b", guard_rules="false"
        )
    assert report is not None, done.stderr
    assert done.returncode == 1  # either way the golden gate fails: nothing blocked, or everything refused
    assert report["policy_version"] == "llama-guard-3:llama-guard-3-1b:ignore-S6,S8"
    assert report["block_rate"] == blocked and report["refusal_rate"] == blocked
    assert report["classifier_held_out"] is None  # the embedded cascade's training metrics are not this guard's
    sources = report["cross_source"]["sources"]
    assert sources and all(source["blocked"] == blocked * source["items"] for source in sources)
    # One chat completion per conversation, each a Llama Guard request (its verdict, no more).
    assert len(worker.state.bodies) == judged(report)
    assert {body["model"] for body in worker.state.bodies} == {"llama-guard-3-1b"}
    assert all(body["max_tokens"] <= 20 and body["temperature"] == 0 for body in worker.state.bodies)


def test_the_deny_rules_decide_before_the_configured_guard(tmp_path: Path) -> None:
    # As the gateway runs it by default: a deny-rule hit is blocked without a round trip, the rest is the guard's.
    worker = llama_guard_worker({}, default="safe")
    with serve(worker) as url:
        done, report = run_eval(tmp_path, guard="llama_guard", guard_url=url)
    assert report is not None, done.stderr
    assert report["policy_version"] == "r3+llama-guard-3:llama-guard:ignore-S6,S8"
    assert 0 < report["block_rate"] < 1 and report["refusal_rate"] == 0.0  # the rules' blocks, and only theirs
    assert 0 < len(worker.state.bodies) < judged(report)


def test_band_mode_sends_the_guard_only_what_the_embedded_cascade_is_unsure_of(tmp_path: Path) -> None:
    worker = llama_guard_worker({}, default="safe")
    with serve(worker) as url:
        done, report = run_eval(tmp_path, guard="llama_guard", guard_url=url, guard_band="[0.1, 0.9]")
    assert report is not None, done.stderr
    asked = len(worker.state.bodies)
    assert 0 < asked < judged(report)
    assert report["policy_version"].endswith("+llama-guard-3:llama-guard:ignore-S6,S8")
    # What the cascade blocks at or above 0.9 stays blocked; the worker's "safe" lets the band's through.
    assert 0 < report["block_rate"] < 1


def test_a_guard_that_cannot_answer_stops_the_run_with_no_numbers(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done, report = run_eval(tmp_path, guard="llama_guard", guard_url=url, guard_attempts="1", guard_timeout_s="2")
    assert done.returncode == 2, done.stderr
    assert report is None
    assert "the guard could not answer after 0 conversations" in done.stdout


@pytest.fixture(scope="module")
def moderation_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """A fleetchat gateway (embedded guard, enterprise key: a held-out run is thousands of requests a minute)."""
    data_dir = tmp_path_factory.mktemp("moderation-gateway")
    with fleetchat_guard(data_dir, Tier.ENTERPRISE) as (url, key):
        yield url, key, data_dir


def test_a_gateways_own_moderations_endpoint_passes_the_smoke_gate(
    tmp_path: Path, moderation_gateway: tuple[str, str, Path]
) -> None:
    url, key, data_dir = moderation_gateway
    # The rule gate off: every conversation reaches the other gateway (its own rules and cascade judge them).
    done, report = run_eval(tmp_path, guard="moderation_api", guard_url=url, guard_api_key=key, guard_rules="false")
    assert report is not None, done.stderr
    assert done.returncode == 0, done.stdout
    assert report["policy_version"] == "moderation-api:omni-moderation-latest"
    assert report["block_rate"] == 1.0 and report["refusal_rate"] == 0.0
    # Each conversation reached the gateway as an authenticated /v1/moderations call, metered in its ledger.
    with sqlite3.connect(data_dir / "fleetchat.db") as db:
        (metered,) = db.execute("SELECT COUNT(*) FROM ledger").fetchone()
    assert metered >= judged(report)

"""The sandbox phase's record and the stand-in model it drives the attacks with: the ratio to idle and its target, the
report section, and the worker calling the python tool with the attack's code (never carried in the user's message)."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from functions.offline.bench.phases.sandbox_phase import ATTACKS, attack_worker
from functions.offline.bench.results.records import BenchResult
from functions.offline.bench.results.sandbox_results import AttackRun, SandboxStats, sandbox_lines
from functions.offline.bench.results.targets import evaluate


def stats(fork_p50: float | None, engine: str | None = "llama.cpp") -> SandboxStats:
    runs = [
        AttackRun(attack="fork bomb", p50_ms=fork_p50, p95_ms=60.0, plain_requests=120, plain_errors=0, attacks=9,
                  limits_hit={"processes": 9}),
        AttackRun(attack="memory bomb", p50_ms=15.0, p95_ms=20.0, plain_requests=120, plain_errors=0, attacks=2,
                  limits_hit={"memory": 2, "timeout": 2}),
    ]  # fmt: skip
    return SandboxStats(isolation="bubblewrap", attackers=2, idle_p50_ms=16.0, idle_p95_ms=19.0, runs=runs,
                        plain_engine=engine)  # fmt: skip


def test_the_ratio_to_idle_is_checked_against_the_target_per_attack() -> None:
    result = BenchResult.model_construct(sandbox=stats(40.0))
    checks = {c.name: c for c in evaluate(result) if "during a" in c.name}
    assert checks["plain request p50 during a fork bomb / idle"].passed is False  # 2.5x
    assert checks["plain request p50 during a memory bomb / idle"].passed is True
    unmeasured = {c.name: c for c in evaluate(BenchResult.model_construct(sandbox=stats(None))) if "fork" in c.name}
    assert next(iter(unmeasured.values())).passed is None
    # Plain requests answered by a stand-in measure the gateway alone: never a pass, whatever the ratio.
    stand_in = [
        c for c in evaluate(BenchResult.model_construct(sandbox=stats(17.0, engine=None))) if "during a" in c.name
    ]
    assert [c.passed for c in stand_in] == [False, False]
    assert "stand-in answering at once" in "\n".join(sandbox_lines(stats(17.0, engine=None)))


def test_the_report_section_names_what_held_each_attack() -> None:
    text = "\n".join(sandbox_lines(stats(17.6)))
    assert "| fork bomb | 17.6 | 60.0 | 1.10 | 120 (0) | 9 | processes 9 |" in text
    assert "| memory bomb | 15.0 | 20.0 | 0.94 | 120 (0) | 2 | memory 2, timeout 2 |" in text


def test_the_stand_in_model_calls_the_python_tool_with_the_attacks_code_then_answers_with_its_result() -> None:
    client = TestClient(attack_worker())
    first = client.post("/v1/chat/completions", json={"model": "mini", "messages": [
        {"role": "user", "content": "attack:1"}]}).json()  # fmt: skip
    [call] = first["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "python" and first["choices"][0]["finish_reason"] == "tool_calls"
    assert json.loads(call["function"]["arguments"]) == {"code": list(ATTACKS.values())[1]}
    result = '{"status": "timeout", "limits_hit": ["memory"]}'
    second = client.post("/v1/chat/completions", json={"model": "mini", "messages": [
        {"role": "user", "content": "attack:1"}, first["choices"][0]["message"],
        {"role": "tool", "tool_call_id": call["id"], "content": result}]}).json()  # fmt: skip
    assert second["choices"][0]["message"]["content"] == result
    plain = client.post("/v1/chat/completions", json={"model": "mini", "messages": [
        {"role": "user", "content": "Say hello."}]}).json()  # fmt: skip
    assert plain["choices"][0]["message"]["content"] == "Hello."

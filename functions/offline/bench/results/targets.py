"""The benchmark's targets and the pass/fail checks computed from a result."""

from __future__ import annotations

from functions.offline.bench.results.continuation_results import continuation_checks
from functions.offline.bench.results.priority_results import priority_checks
from functions.offline.bench.results.records import BenchResult, Check
from functions.offline.bench.results.sandbox_results import UNDER_ATTACK_P50_MAX

SCALING_MIN = 4.0  # 8-stream aggregate tok/s over single-stream tok/s
PREFIX_WARM_OVER_COLD_MAX = 0.2
GATEWAY_THROUGHPUT_RATIO_MIN = 0.95
GATEWAY_TTFT_DIFF_MAX_MS = 10.0
CONVERSATION_REUSE_MIN = 0.9  # turn N's cached tokens over turn N-1's whole prompt
SQLITE_APPEND_P99_MAX_MS = 50.0
ADMISSION_P50_MAX_MS = 2.0  # admit + settle + ledger write per request, SQLite
SHARED_STATE_P50_MAX_MS = 2.0  # what the shared control state adds to a streamed answer's first event, SQLite
SAFETY_P50_MAX_MS = 10.0  # the safety pre-filter on a 1,000-token multi-turn context


def _at_least(name: str, value: float | None, minimum: float, unit: str) -> Check:
    passed = None if value is None else value >= minimum
    return Check(name=name, value=value, unit=unit, target=f">= {minimum:g}{unit}", passed=passed)


def _at_most(name: str, value: float | None, maximum: float, unit: str) -> Check:
    passed = None if value is None else value <= maximum
    return Check(name=name, value=value, unit=unit, target=f"<= {maximum:g}{unit}", passed=passed)


def _exactly(name: str, value: float | None, expected: float, unit: str, measured: bool = True) -> Check:
    passed = None if value is None or not measured else value == expected
    return Check(name=name, value=value, unit=unit, target=f"== {expected:g}{unit}", passed=passed)


def evaluate(result: BenchResult) -> list[Check]:
    """Every target the run could measure; a check whose value is None was not measured (neither pass nor fail)."""
    checks = [
        _at_least("8-stream / 1-stream aggregate tok/s", result.scaling_8_over_1, SCALING_MIN, "x"),
    ]
    if result.levels:
        errors = float(sum(level.errors for level in result.levels))
        checks.append(_at_most("failed requests in the load levels", errors, 0, ""))
    if result.prefix is not None:
        checks.append(
            _at_most("prefix cache: warm / cold TTFT", result.prefix.warm_over_cold, PREFIX_WARM_OVER_COLD_MAX, "x")
        )
    if result.overhead is not None:
        overhead = result.overhead
        checks += [
            _at_least(
                f"gateway / direct tok/s (c={overhead.concurrency})",
                overhead.throughput_ratio,
                GATEWAY_THROUGHPUT_RATIO_MIN,
                "x",
            ),
            _at_most(
                f"gateway - direct TTFT p50 (c={overhead.concurrency})",
                overhead.ttft_p50_diff_ms,
                GATEWAY_TTFT_DIFF_MAX_MS,
                " ms",
            ),
            _at_most(
                "gateway - direct TTFT p50 (one at a time)",
                overhead.unloaded_ttft_p50_diff_ms,
                GATEWAY_TTFT_DIFF_MAX_MS,
                " ms",
            ),
        ]
    if result.conversation is not None:
        checks.append(
            _at_least(
                "multi-turn: worst turn's cached / previous prompt",
                result.conversation.min_reuse,
                CONVERSATION_REUSE_MIN,
                "x",
            )
        )
    for store in result.store_appends:
        if store.store.startswith("sqlite"):
            checks.append(_at_most("append a turn p99 (sqlite)", store.p99_ms, SQLITE_APPEND_P99_MAX_MS, " ms"))
    for engine in result.control_state:
        if engine.engine == "sqlite":
            name = "shared state: first event's wait p50 (sqlite)"
            checks.append(_at_most(name, engine.first_event_p50_ms, SHARED_STATE_P50_MAX_MS, " ms"))
    if result.admission is not None:
        if result.admission.cost is not None:
            cost = result.admission.cost
            checks.append(_at_most("admission + ledger write p50 (sqlite)", cost.p50_ms, ADMISSION_P50_MAX_MS, " ms"))
        if result.admission.limit is not None:
            limit = result.admission.limit
            checks.append(
                _exactly(
                    f"2 replicas, 1 store: accepted in the window (limit {limit.limit_rpm} RPM)",
                    float(limit.accepted),
                    limit.limit_rpm,
                    "",
                    measured=limit.sent > limit.limit_rpm,  # else the limit was never reached
                )
            )
    if result.safety is not None and (pre := result.safety.case("pre-filter, multi-turn")) is not None:
        checks.append(
            _at_most(f"safety pre-filter p50, {pre.context_tokens}-token context", pre.p50_ms, SAFETY_P50_MAX_MS, " ms")
        )
    if (long := result.long_conversation) is not None:
        checks.append(_exactly(f"long conversation: turns answered of {len(long.turns)}", float(long.answered),
                               float(len(long.turns)), ""))  # fmt: skip
    if result.sandbox is not None:
        for run in result.sandbox.runs:
            ratio = result.sandbox.ratio(run)
            check = _at_most(f"plain request p50 during a {run.attack} / idle", ratio, UNDER_ATTACK_P50_MAX, "x")
            if result.sandbox.plain_engine is None:  # a stand-in answered the plain requests: never a pass
                check = check.model_copy(update={"passed": None if ratio is None else False})
            checks.append(check)
    checks += [Check.model_validate(row) for row in priority_checks(result.priority)]
    checks += [Check.model_validate(row) for row in continuation_checks(result.continuation)]
    return checks

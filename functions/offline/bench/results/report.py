"""Render a benchmark result as markdown tables and write bench.json + bench.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from functions.offline.bench.results.continuation_results import continuation_lines
from functions.offline.bench.results.embeddings_results import embeddings_lines
from functions.offline.bench.results.guidellm_results import guidellm_lines
from functions.offline.bench.results.long_conversation_results import long_conversation_lines
from functions.offline.bench.results.priority_results import priority_lines
from functions.offline.bench.results.records import BenchResult, Check, GoodputStats, LevelStats, TierGoodput
from functions.offline.bench.results.relay_cpu_results import relay_cpu_lines
from functions.offline.bench.results.result_cache_results import result_cache_lines
from functions.offline.bench.results.retrieval_results import retrieval_lines
from functions.offline.bench.results.sandbox_results import sandbox_lines

MISSING = "—"


def fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    if value is None:
        return MISSING
    return f"{value:,.{digits}f}{suffix}"


def mark(passed: bool | None) -> str:
    if passed is None:
        return "n/a (not measured)"
    return "✅ pass" if passed else "❌ fail"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _check_rows(checks: list[Check]) -> list[list[str]]:
    rows = []
    for check in checks:
        digits = 0 if check.unit == "" else 2
        rows.append([check.name, fmt(check.value, digits, check.unit), check.target, mark(check.passed)])
    return rows


def _level_row(level: LevelStats, first: str) -> list[str]:
    return [
        first,
        str(level.requests),
        str(level.errors),
        fmt(level.ttft_p50_ms),
        fmt(level.ttft_p95_ms),
        fmt(level.itl_p50_ms),
        fmt(level.itl_p95_ms),
        fmt(level.output_tok_s),
        fmt(level.per_stream_tok_s_p50),
        str(level.output_tokens),
        fmt(level.wall_s, 2),
    ]


LEVEL_HEADER = [
    "concurrency",
    "requests",
    "errors",
    "TTFT p50 ms",
    "TTFT p95 ms",
    "ITL p50 ms",
    "ITL p95 ms",
    "aggregate tok/s",
    "per-stream tok/s p50",
    "output tokens",
    "wall s",
]


def _effective_max_tokens(cfg: dict[str, Any]) -> object:
    plan = cfg.get("plan")
    return plan.get("max_tokens") if isinstance(plan, dict) else cfg.get("max_tokens")


def render_markdown(result: BenchResult) -> str:
    cfg = result.config
    machine = result.machine
    lines = [
        "# fleetchat benchmark",
        "",
        f"- started {result.started_at}, took {result.duration_s:.0f} s",
        f"- target: `{result.target_url}`; worker (direct): `{result.worker_url or MISSING}`",
        f"- model `{cfg.get('model')}`, max_tokens {_effective_max_tokens(cfg)}, quick={cfg.get('quick')}",
        f"- machine: {machine.get('cpu_count')} CPUs ({machine.get('usable_cpus')} usable), "
        f"python {machine.get('python')}, torch {machine.get('torch') or MISSING}, "
        f"transformers {machine.get('transformers') or MISSING}",
    ]
    lines += [f"- note: {note}" for note in result.notes]
    lines += ["", "## Targets", ""]
    lines += _table(["check", "value", "target", "result"], _check_rows(result.checks))

    if result.levels:
        lines += ["", "## Load (streaming, include_usage)", ""]
        lines += _table(LEVEL_HEADER, [_level_row(level, str(level.concurrency)) for level in result.levels])
        lines += ["", f"8-stream / 1-stream aggregate throughput: **{fmt(result.scaling_8_over_1, 2, 'x')}**"]

    if result.prefix is not None:
        prefix = result.prefix
        warm_cached = ", ".join(MISSING if c is None else str(c) for c in prefix.warm_cached_tokens) or MISSING
        rows = [
            ["system prompt tokens (cold request's prompt_tokens)", fmt(prefix.system_prompt_tokens, 0)],
            ["cold TTFT ms", fmt(prefix.cold_ttft_ms)],
            ["warm TTFT ms (median)", fmt(prefix.warm_ttft_ms)],
            ["warm TTFT ms (each)", ", ".join(fmt(v) for v in prefix.warm_ttft_ms_all) or MISSING],
            ["warm / cold", fmt(prefix.warm_over_cold, 3)],
            ["cached_tokens (cold)", fmt(prefix.cold_cached_tokens, 0)],
            ["cached_tokens (warm)", warm_cached],
            [
                "worker prefix-cache hit rate (this phase)",
                fmt(None if prefix.worker_hit_rate is None else prefix.worker_hit_rate * 100, 1, " %"),
            ],
            [
                "worker hits / queries delta (tokens)",
                f"{fmt(prefix.worker_hits_delta, 0)} / {fmt(prefix.worker_queries_delta, 0)}",
            ],
            ["errors", str(prefix.errors)],
        ]
        lines += ["", "## Prefix cache (shared ~1k-token system prompt)", ""]
        lines += _table(["measure", "value"], rows)
        if prefix.metrics_note:
            lines += ["", prefix.metrics_note]

    if result.overhead is not None:
        overhead = result.overhead
        lines += ["", f"## Gateway overhead (c={overhead.concurrency}, {overhead.rounds} interleaved round(s))", ""]
        lines += _table(
            ["path", *LEVEL_HEADER[1:]],
            [_level_row(overhead.gateway, "gateway"), _level_row(overhead.direct, "direct to worker")],
        )
        rows = [
            ["throughput gateway / direct", fmt(overhead.throughput_ratio, 3, "x")],
            ["TTFT p50 gateway - direct (under load)", fmt(overhead.ttft_p50_diff_ms, 1, " ms")],
            [
                "TTFT p50 one at a time, max_tokens=1 (gateway / direct)",
                f"{fmt(overhead.unloaded_ttft_p50_gateway_ms)} / {fmt(overhead.unloaded_ttft_p50_direct_ms)} ms",
            ],
            ["TTFT p50 gateway - direct (one at a time)", fmt(overhead.unloaded_ttft_p50_diff_ms, 1, " ms")],
            [
                "GET /v1/models p50 (gateway / direct)",
                f"{fmt(overhead.models_p50_gateway_ms, 2)} / {fmt(overhead.models_p50_direct_ms, 2)} ms",
            ],
            ["GET /v1/models p50 gateway - direct (no model work)", fmt(overhead.models_p50_diff_ms, 2, " ms")],
        ]
        lines += [""]
        lines += _table(["measure", "value"], rows)

    if result.conversation is not None:
        conversation = result.conversation
        lines += ["", f"## Multi-turn conversation ({len(conversation.turns)} turns through the gateway)", ""]
        lines += _table(
            ["turn", "prompt tokens", "cached tokens", "previous prompt", "cached / previous", "latency ms"],
            [
                [
                    str(t.turn),
                    str(t.prompt_tokens),
                    str(t.cached_tokens),
                    fmt(t.previous_prompt_tokens, 0),
                    fmt(t.reuse, 3),
                    fmt(t.latency_ms),
                ]
                for t in conversation.turns
            ],
        )
        hit_rate = None if conversation.hit_rate is None else conversation.hit_rate * 100
        lines += ["", f"Prefix hit rate over turns 2-{len(conversation.turns)}: **{fmt(hit_rate, 1, ' %')}**"]

    if result.store_appends:
        lines += ["", "## Conversation store: append a turn (user + assistant message)", ""]
        lines += _table(
            ["store", "appends", "p50 ms", "p99 ms", "max ms"],
            [
                [s.store, str(s.appends), fmt(s.p50_ms, 2), fmt(s.p99_ms, 2), fmt(s.max_ms, 2)]
                for s in result.store_appends
            ],
        )

    if result.control_state:
        lines += ["", "## Shared control state: one streamed answer's writes", ""]
        lines += _table(
            ["engine", "answers x tokens", "token every", "first event p50 / p99 ms", "event p50 / p99 ms",
             "requests / answer", "requests / 1k tokens"],
            [
                [c.engine, f"{c.answers} x {c.tokens_per_answer}", fmt(c.token_interval_ms, 0, " ms"),
                 f"{fmt(c.first_event_p50_ms, 2)} / {fmt(c.first_event_p99_ms, 2)}",
                 f"{fmt(c.event_p50_ms, 2)} / {fmt(c.event_p99_ms, 2)}",
                 fmt(c.requests_per_answer, 1), fmt(c.requests_per_1k_tokens, 0)]
                for c in result.control_state
            ],
        )  # fmt: skip
        lines += [
            "",
            "Every event is written before any client sees it (so another gateway can finish the answer exactly);",
            "events that arrive while a write is in flight share the next one.",
        ]

    if result.admission is not None:
        lines += _admission_lines(result)

    if result.safety is not None:
        lines += [
            "",
            "## Safety pipeline",
            "",
            f"Policy {result.safety.policy_version}, in-process on this machine.",
            "",
        ]
        lines += _table(
            ["case", "context tokens", "runs", "p50 ms", "p99 ms", "max ms", "decided by"],
            [
                [
                    c.case,
                    str(c.context_tokens or "-"),
                    str(c.runs),
                    fmt(c.p50_ms, 2),
                    fmt(c.p99_ms, 2),
                    fmt(c.max_ms, 2),
                    c.decided_by or "-",
                ]
                for c in result.safety.costs
            ],
        )

    if result.priority is not None:
        lines += priority_lines(result.priority)
    if result.continuation is not None:
        lines += continuation_lines(result.continuation)
    if result.relay_cpu is not None:
        lines += relay_cpu_lines(result.relay_cpu)
    if result.sandbox is not None:
        lines += sandbox_lines(result.sandbox)
    if result.long_conversation is not None:
        lines += long_conversation_lines(result.long_conversation)
    if result.guidellm is not None:
        lines += guidellm_lines(result.guidellm)
    if result.goodput is not None:
        lines += _goodput_lines(result.goodput)
    if result.result_cache is not None:
        lines += result_cache_lines(result.result_cache)
    if result.embeddings is not None:  # issue 22
        lines += embeddings_lines(result.embeddings)
    if result.retrieval is not None:  # issue 23
        lines += retrieval_lines(result.retrieval)

    samples = [(level.label, e) for level in _all_levels(result) for e in level.error_samples]
    if result.prefix is not None:
        samples += [("prefix", e) for e in result.prefix.error_samples]
    if result.goodput is not None:
        samples += [(f"goodput {g.tier}", e) for g in result.goodput.mixed for e in g.error_samples]
    if samples:
        lines += ["", "## Error samples", ""]
        lines += [f"- {label}: `{error}`" for label, error in samples]
    return "\n".join(lines) + "\n"


def _share(value: float | None) -> str:
    return fmt(None if value is None else value * 100, 1, " %")


def _goodput_lines(goodput: GoodputStats) -> list[str]:
    lines = [
        "",
        f"## Goodput per tier (streamed, max_tokens {goodput.max_tokens}, client-side)",
        "",
        "A request meets its tier's SLO (shared/fleet/tiers.py TierSlo) when its TTFT and the p95 of its own "
        "inter-token gaps are within the tier's bounds (the gateway's rule, `fleetchat_gateway_goodput_total`); "
        "errors do not. The 'mean ITL' column applies aiperf's rule (TTFT and the request's mean inter-token latency) "
        "to the same requests.",
        "",
        "Every tier at once:",
        "",
    ]
    header = ["tier", "pool", "SLO TTFT / ITL s", "streams", "requests", "errors", "goodput", "goodput (mean ITL)"]
    header += ["TTFT p50 / p95 ms", "ITL p95 ms"]
    lines += _table(header, [_goodput_row(g) for g in goodput.mixed])
    if goodput.server_goodput is not None:
        lines += [
            "",
            f"The gateway's own counter over the same run: **{_share(goodput.server_goodput)}** of "
            f"{fmt(goodput.server_judged, 0)} judged streams (server-side TTFT from arrival at the gateway).",
        ]
    if goodput.alone:
        lines += ["", "Each tier alone, our client vs aiperf (independent client, same prompts and load):", ""]
        rows = []
        for c in goodput.alone:
            a = c.aiperf
            aiperf_share = "not run" if a is None else (a.error or _share(a.goodput))
            rows.append(
                [
                    c.ours.tier,
                    f"{c.ours.concurrency} x {c.ours.requests}",
                    _share(c.ours.goodput),
                    _share(c.ours.goodput_mean_itl),
                    f"**{aiperf_share}**" if a is not None and a.error is None else aiperf_share,
                    f"{fmt(c.ours.ttft_p95_ms)} / {fmt(None if a is None else a.ttft_p95_ms)}",
                    "-" if a is None else f"{a.good} of {a.requests + a.errors}",
                ]
            )
        header = ["tier", "streams x requests", "ours", "ours (mean ITL)", "aiperf", "TTFT p95 ms ours / aiperf"]
        lines += _table([*header, "aiperf good / sent"], rows)
    lines += [f"- note: {note}" for note in goodput.notes]
    return lines


def _goodput_row(g: TierGoodput) -> list[str]:
    return [
        g.tier,
        g.pool,
        f"{g.slo_ttft_s:g} / {g.slo_inter_token_s:g}",
        str(g.concurrency),
        str(g.requests),
        str(g.errors),
        f"**{_share(g.goodput)}**",
        _share(g.goodput_mean_itl),
        f"{fmt(g.ttft_p50_ms)} / {fmt(g.ttft_p95_ms)}",
        fmt(g.itl_p95_ms),
    ]


def _admission_lines(result: BenchResult) -> list[str]:
    assert result.admission is not None
    cost, limit = result.admission.cost, result.admission.limit
    lines = ["", "## Admission control", ""]
    if cost is not None:
        lines += [f"Added per request, in-process: admit + settle + ledger write ({cost.requests} requests).", ""]
        lines += _table(
            ["store", "requests", "p50 ms", "p99 ms", "max ms", "admit p50 ms", "settle p50 ms", "ledger p50 ms"],
            [
                [
                    cost.store,
                    str(cost.requests),
                    fmt(cost.p50_ms, 2),
                    fmt(cost.p99_ms, 2),
                    fmt(cost.max_ms, 2),
                    fmt(cost.admit_p50_ms, 2),
                    fmt(cost.settle_p50_ms, 2),
                    fmt(cost.ledger_p50_ms, 2),
                ]
            ],
        )
    if limit is not None:
        unsent = f" ({limit.planned - limit.sent} of {limit.planned} not sent: the window was ending)"
        lines += [
            "",
            f"2 gateway replicas on 1 SQLite store, limit {limit.limit_rpm} RPM (key and tenant): {limit.sent} "
            f"requests{unsent if limit.sent < limit.planned else ''} (max_tokens=1) alternating between the replicas "
            f"at concurrency {limit.concurrency} inside one one-minute window, in {fmt(limit.wall_s, 2)} s.",
            "",
        ]
        rows = [[r.replica, str(r.sent), str(r.accepted), str(r.refused), str(r.other)] for r in limit.replicas]
        rows.append(
            ["**total**", str(limit.sent), f"**{limit.accepted}**", str(limit.refused), str(sum(limit.other.values()))]
        )
        lines += _table(["replica", "sent", "accepted (200)", "refused (429)", "other"], rows)
        if limit.other:
            lines += ["", "Other outcomes: " + ", ".join(f"`{k}` x{v}" for k, v in sorted(limit.other.items()))]
    return lines


def _all_levels(result: BenchResult) -> list[LevelStats]:
    levels = list(result.levels)
    if result.overhead is not None:
        levels += [result.overhead.gateway, result.overhead.direct]
    return levels


def write_reports(result: BenchResult, out_dir: Path) -> tuple[Path, Path]:
    """Write out_dir/bench.json and out_dir/bench.md; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "bench.json"
    md_path = out_dir / "bench.md"
    json_path.write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(result), encoding="utf-8")
    return json_path, md_path

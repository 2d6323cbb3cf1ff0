"""Benchmark orchestration: plan the phases, drive them with progress bars, and write the reports."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
from openai import AsyncOpenAI
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from functions.local_stack.worker_key import WORKER_KEY_ENV
from functions.offline.bench import prompts
from functions.offline.bench.aiperf_check import find_aiperf
from functions.offline.bench.config import BenchConfig, Plan, make_plan
from functions.offline.bench.engine.phase import engine_phase
from functions.offline.bench.guidellm_check import find_guidellm
from functions.offline.bench.machine import machine_info
from functions.offline.bench.phases.admission_phase import admission_phase
from functions.offline.bench.phases.choices_phase import choices_phase
from functions.offline.bench.phases.continuation_phase import ContinuationConfig, continuation_phase
from functions.offline.bench.phases.control_state_phase import control_state_phase
from functions.offline.bench.phases.conversation_phase import multi_turn
from functions.offline.bench.phases.embeddings_phase import embeddings_phase
from functions.offline.bench.phases.goodput_phase import KEYS_FILE, GoodputPlan, goodput_phase
from functions.offline.bench.phases.guidellm_phase import guidellm_phase
from functions.offline.bench.phases.long_conversation_phase import long_conversation_phase
from functions.offline.bench.phases.priority_phase import PriorityConfig, priority_phase
from functions.offline.bench.phases.relay_cpu_phase import relay_cpu_phase
from functions.offline.bench.phases.result_cache_phase import result_cache_phase
from functions.offline.bench.phases.retrieval_phase import retrieval_phase
from functions.offline.bench.phases.safety_phase import safety_phase
from functions.offline.bench.phases.sandbox_phase import sandbox_phase
from functions.offline.bench.phases.structured_phase import structured_phase
from functions.offline.bench.prom import hit_rate, scrape_prefix_counters
from functions.offline.bench.results.records import BenchResult, GoodputStats, LevelStats, OverheadStats, PrefixStats
from functions.offline.bench.results.report import fmt, mark, write_reports
from functions.offline.bench.results.store_append import store_append_phase
from functions.offline.bench.results.targets import evaluate
from functions.offline.bench.stack import LocalStack, gateway_reachable, start_local_stack, wait_healthy
from functions.offline.evals.tenants import ensure_eval_keys
from functions.offline.measure import stats
from functions.offline.measure.load import make_client, run_level, stream_chat, timed_get
from shared.fleet.tables import tables
from shared.fleet.tiers import Tier

console = Console(stderr=True)


def scaling(levels: list[LevelStats], high: int = 8, low: int = 1) -> float | None:
    """Aggregate tok/s at concurrency `high` over that at `low`."""
    by_c = {level.concurrency: level.output_tok_s for level in levels if level.requests > level.errors}
    return stats.ratio(by_c.get(high), by_c.get(low))


def local_worker_urls(model: str) -> list[str]:
    from shared.settings import Settings

    return Settings().local_worker_urls().get(model, [])


def local_admin_key_path() -> Path:
    from shared.settings import Settings

    return Settings().local_admin_key_path


def read_local_key(path: Path | None = None) -> str:
    from shared.settings import Settings

    key_path = path or Settings().local_key_path
    try:
        return key_path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise RuntimeError(f"no API key given and none readable at {key_path} ({exc}); pass --api-key") from exc


def worker_healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url.rstrip('/')}/health", timeout=3.0).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Targets:
    """Who the phases talk to: the measured endpoint, and the worker for the direct path and /metrics."""

    url: str
    api_key: str | None
    worker_urls: list[str]  # the pool's replicas, for /metrics; the first one is the direct path
    direct: bool  # the measured endpoint is the worker itself
    admin_key: str | None = None  # creates the goodput phase's bench tenants
    worker_key: str | None = None  # the stack's worker key: its workers answer only requests presenting it


def new_progress() -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


def _advance(progress: Progress, task: int) -> Callable[[stats.RequestResult], None]:
    return lambda _result: progress.advance(task)


class Phases:
    """The measuring phases, sharing clients, the plan and one progress display."""

    def __init__(self, cfg: BenchConfig, plan: Plan, targets: Targets, progress: Progress) -> None:
        self.cfg = cfg
        self.plan = plan
        self.targets = targets
        self.progress = progress
        self.client = make_client(targets.url, targets.api_key, cfg.request_timeout_s)
        self.direct_client: AsyncOpenAI | None = None
        if targets.worker_urls and not targets.direct:
            self.direct_client = make_client(targets.worker_urls[0], targets.worker_key, cfg.request_timeout_s)
        self.http = httpx.AsyncClient(timeout=10.0)
        self.run_id = secrets.token_hex(3)

    async def close(self) -> None:
        await self.client.close()
        if self.direct_client is not None:
            await self.direct_client.close()
        await self.http.aclose()

    async def warm_up(self) -> None:
        """One short unmeasured request, so the levels do not pay for first-call costs; fails loudly if refused."""
        task = self.progress.add_task("warm-up request", total=1)
        result = await stream_chat(
            self.client, self.cfg.model, prompts.generation_messages(0, f"warm-{self.run_id}"), 4
        )
        self.progress.advance(task)
        if result.error is not None:
            raise RuntimeError(f"the warm-up request to {self.targets.url} failed: {result.error}")

    async def levels(self) -> list[LevelStats]:
        out = []
        for concurrency, count in self.plan.level_requests:
            task = self.progress.add_task(f"load c={concurrency}", total=count)
            messages = [prompts.generation_messages(i, f"{self.run_id}-c{concurrency}-{i}") for i in range(count)]
            run = await run_level(
                self.client,
                self.cfg.model,
                messages,
                concurrency,
                self.plan.max_tokens,
                self.cfg.temperature,
                on_done=_advance(self.progress, task),
            )
            out.append(stats.aggregate_level(f"c={concurrency}", concurrency, run.results, run.wall_s))
        return out

    async def prefix(self) -> PrefixStats:
        cfg, plan = self.cfg, self.plan
        nonce = secrets.token_hex(8)
        system = prompts.long_system_prompt(nonce, cfg.prefix_system_words)
        headers = {"X-Session-Id": f"bench-prefix-{nonce}"}  # sticky replica through the gateway
        task = self.progress.add_task("prefix cache: cold + warm", total=1 + plan.prefix_warm_requests)
        before = await scrape_prefix_counters(self.http, self.targets.worker_urls, None)
        results = []
        for i in range(1 + plan.prefix_warm_requests):  # one at a time: TTFT without queueing
            messages = prompts.prefix_messages(system, i)
            result = await stream_chat(
                self.client, cfg.model, messages, cfg.prefix_max_tokens, cfg.temperature, headers
            )
            results.append(result)
            self.progress.advance(task)
        after = await scrape_prefix_counters(self.http, self.targets.worker_urls, None)
        cold, warm = results[0], results[1:]
        warm_ttfts = [stats.to_ms(r.ttft_s) for r in warm if r.ok and r.ttft_s is not None]
        warm_ms = stats.median([v for v in warm_ttfts if v is not None])
        cold_ms = stats.to_ms(cold.ttft_s) if cold.ok else None
        note = (
            ""
            if before is not None and after is not None
            else ("The worker's /metrics could not be read (or lacks the vLLM prefix-cache counters): no hit rate.")
        )
        if not note:
            note = "Hit rate: delta of the worker's prefix-cache counters over this phase (other traffic counts too)."
        errors = [r.error for r in results if r.error is not None]
        return PrefixStats(
            system_prompt_tokens=cold.prompt_tokens,
            cold_ttft_ms=cold_ms,
            warm_ttft_ms=warm_ms,
            warm_ttft_ms_all=[v for v in warm_ttfts if v is not None],
            warm_over_cold=stats.ratio(warm_ms, cold_ms),
            cold_cached_tokens=cold.cached_tokens,
            warm_cached_tokens=[r.cached_tokens for r in warm],
            worker_hit_rate=hit_rate(before, after) if before and after else None,
            worker_hits_delta=after.hits - before.hits if before and after else None,
            worker_queries_delta=after.queries - before.queries if before and after else None,
            metrics_note=note,
            errors=len(errors),
            error_samples=list(dict.fromkeys(errors))[: stats.MAX_ERROR_SAMPLES],
        )

    async def overhead(self) -> OverheadStats:
        assert self.direct_client is not None
        cfg, plan = self.cfg, self.plan
        c = cfg.overhead_concurrency
        sides = {"gateway": self.client, "direct": self.direct_client}
        collected: dict[str, list[stats.RequestResult]] = {"gateway": [], "direct": []}
        walls = {"gateway": 0.0, "direct": 0.0}
        task = self.progress.add_task(
            f"gateway vs direct, c={c}", total=2 * plan.overhead_rounds * plan.overhead_requests
        )
        for r in range(plan.overhead_rounds):
            order = ["direct", "gateway"] if r % 2 == 0 else ["gateway", "direct"]  # alternate to cancel drift
            for s, side in enumerate(order):
                # Same prompts on both paths, but a distinct same-length tag so neither side reuses the other's KV.
                messages = [prompts.generation_messages(i, f"{r}{s}{i:03d}") for i in range(plan.overhead_requests)]
                run = await run_level(
                    sides[side],
                    cfg.model,
                    messages,
                    c,
                    plan.max_tokens,
                    cfg.temperature,
                    on_done=_advance(self.progress, task),
                )
                collected[side] += run.results
                walls[side] += run.wall_s
        gateway = stats.aggregate_level("overhead gateway", c, collected["gateway"], walls["gateway"])
        direct = stats.aggregate_level("overhead direct", c, collected["direct"], walls["direct"])
        probe_gw, probe_direct = await self._unloaded_probe(sides)
        models_gw, models_direct = await self._models_probe()
        return OverheadStats(
            concurrency=c,
            rounds=plan.overhead_rounds,
            gateway=gateway,
            direct=direct,
            throughput_ratio=stats.ratio(gateway.output_tok_s, direct.output_tok_s),
            ttft_p50_diff_ms=stats.difference(gateway.ttft_p50_ms, direct.ttft_p50_ms),
            unloaded_ttft_p50_gateway_ms=probe_gw,
            unloaded_ttft_p50_direct_ms=probe_direct,
            unloaded_ttft_p50_diff_ms=stats.difference(probe_gw, probe_direct),
            models_p50_gateway_ms=models_gw,
            models_p50_direct_ms=models_direct,
            models_p50_diff_ms=stats.difference(models_gw, models_direct),
        )

    async def _unloaded_probe(self, sides: dict[str, AsyncOpenAI]) -> tuple[float | None, float | None]:
        """Alternating single requests with max_tokens=1: TTFT with no queueing, gateway vs direct (p50, ms)."""
        task = self.progress.add_task("one-at-a-time TTFT probe", total=2 * self.plan.probe_pairs)
        ttfts: dict[str, list[float]] = {"gateway": [], "direct": []}
        for k in range(self.plan.probe_pairs):
            order = ["direct", "gateway"] if k % 2 == 0 else ["gateway", "direct"]
            for s, side in enumerate(order):
                messages = prompts.generation_messages(k, f"9{s}{k:03d}")
                result = await stream_chat(sides[side], self.cfg.model, messages, 1, self.cfg.temperature)
                if result.ok and result.ttft_s is not None:
                    ttfts[side].append(result.ttft_s)
                self.progress.advance(task)
        return stats.to_ms(stats.median(ttfts["gateway"])), stats.to_ms(stats.median(ttfts["direct"]))

    async def _models_probe(self) -> tuple[float | None, float | None]:
        """GET /v1/models through the gateway (auth + HTTP, no model work) vs the worker (p50, ms)."""
        n = self.plan.models_probe_requests
        task = self.progress.add_task("GET /v1/models probe", total=2 * n)
        gw_url = f"{self.targets.url.rstrip('/')}/v1/models"
        direct_url = f"{self.targets.worker_urls[0].rstrip('/')}/v1/models"
        auth = {"Authorization": f"Bearer {self.targets.api_key}"} if self.targets.api_key else None
        times: dict[str, list[float]] = {"gateway": [], "direct": []}
        for _ in range(n):
            for side, url, headers in (("gateway", gw_url, auth), ("direct", direct_url, None)):
                elapsed = await timed_get(self.http, url, headers)
                if elapsed is not None:
                    times[side].append(elapsed)
                self.progress.advance(task)
        return stats.to_ms(stats.median(times["gateway"])), stats.to_ms(stats.median(times["direct"]))


async def _measure(cfg: BenchConfig, plan: Plan, targets: Targets, result: BenchResult) -> None:
    with new_progress() as progress:
        phases = Phases(cfg, plan, targets, progress)
        try:
            await phases.warm_up()
            result.levels = await phases.levels()
            result.scaling_8_over_1 = scaling(result.levels)
            result.prefix = await phases.prefix()
            if cfg.goodput and not targets.direct:
                try:
                    result.goodput = await _goodput(cfg, targets, progress)
                except Exception as exc:  # keep what was measured (no admin key, a refused key, ...)
                    result.notes.append(f"goodput phase failed: {type(exc).__name__}: {exc}")
            if not targets.direct:
                try:
                    sizes = {"streams": cfg.guidellm_streams, "requests": cfg.guidellm_requests, "quick": cfg.quick}
                    result.guidellm = await guidellm_phase(
                        find_guidellm(cfg.guidellm),
                        targets.url,
                        targets.api_key,
                        cfg.model,
                        cfg.out_dir,
                        progress,
                        notes=result.notes,
                        timeout_s=cfg.request_timeout_s * 4,
                        **sizes,
                    )
                except Exception as exc:  # as above
                    result.notes.append(f"guidellm phase failed: {type(exc).__name__}: {exc}")
            if phases.direct_client is not None:
                result.overhead = await phases.overhead()
            if not targets.direct:
                result.result_cache = await result_cache_phase(targets, cfg, plan.max_tokens, progress, result.notes)
            if not targets.direct:
                result.conversation = await multi_turn(
                    phases.client, cfg.model, cfg.conversation_max_tokens, progress, cfg.conversation_turns
                )
                try:  # issue 50: a conversation past its pool's context, every turn answered
                    turns = min(cfg.long_conversation_turns, 20) if cfg.quick else cfg.long_conversation_turns
                    context = tables().pools[cfg.model].local.max_model_len
                    result.long_conversation = await long_conversation_phase(
                        phases.client, cfg.model, context, turns, cfg.long_conversation_max_tokens, progress
                    )
                except Exception as exc:  # as above
                    result.notes.append(f"long conversation phase failed: {type(exc).__name__}: {exc}")
            appends = min(cfg.store_appends, 60) if cfg.quick else cfg.store_appends
            try:
                result.store_appends, notes = await asyncio.to_thread(store_append_phase, appends, progress)
                result.notes += notes
            except Exception as exc:  # a store phase failure must not throw away the phases already measured
                result.notes.append(f"store append phase failed: {type(exc).__name__}: {exc}")
            try:
                answers = 5 if cfg.quick else cfg.control_state_answers
                result.control_state, notes = await control_state_phase(
                    answers, cfg.control_state_tokens, cfg.control_state_token_interval_s, progress
                )
                result.notes += notes
            except Exception as exc:  # as above: keep what was measured
                result.notes.append(f"control state phase failed: {type(exc).__name__}: {exc}")
            admission_requests = min(cfg.admission_requests, 100) if cfg.quick else cfg.admission_requests
            limit_rpm = min(cfg.admission_limit_rpm, 10) if cfg.quick else cfg.admission_limit_rpm
            try:
                result.admission, notes = await admission_phase(
                    cfg.model, targets.worker_urls, admission_requests, limit_rpm, progress
                )
                result.notes += notes
            except Exception as exc:  # as above: keep what was measured
                result.notes.append(f"admission phase failed: {type(exc).__name__}: {exc}")
            try:
                load_s = min(cfg.priority_load_s, 20.0) if cfg.quick else cfg.priority_load_s
                priority = PriorityConfig(load_s=load_s, max_tokens=plan.max_tokens)
                result.priority, notes = await priority_phase(cfg.model, targets.worker_urls, priority, progress)
                result.notes += notes
            except Exception as exc:  # as above
                result.notes.append(f"priority phase failed: {type(exc).__name__}: {exc}")
            if cfg.continuation:
                try:
                    continuation = ContinuationConfig(
                        runs=min(cfg.continuation_runs, 2) if cfg.quick else cfg.continuation_runs,
                        max_tokens=plan.max_tokens,
                        kill_after_chunks=cfg.continuation_kill_after_chunks,
                    )
                    result.continuation, notes = await continuation_phase(cfg.model, continuation, progress)
                    result.notes += notes
                except Exception as exc:  # as above
                    result.notes.append(f"continuation phase failed: {type(exc).__name__}: {exc}")
            if cfg.relay_cpu:
                try:
                    rounds = 1 if cfg.quick else cfg.relay_cpu_rounds
                    result.relay_cpu, notes = await relay_cpu_phase(
                        cfg.model, targets.worker_urls, progress, streams=cfg.relay_cpu_streams,
                        concurrency=cfg.relay_cpu_concurrency, max_tokens=cfg.relay_cpu_max_tokens, rounds=rounds,
                    )  # fmt: skip
                    result.notes += notes
                except Exception as exc:  # as above
                    result.notes.append(f"relay CPU phase failed: {type(exc).__name__}: {exc}")
            try:  # issue 53: the gateway's latency while its python tool's sandboxes run a fork and a memory bomb
                plain = min(cfg.sandbox_plain_requests, 20) if cfg.quick else cfg.sandbox_plain_requests
                result.sandbox, notes = await sandbox_phase(
                    progress, plain_requests=plain, attackers=cfg.sandbox_attackers,
                    plain_worker_urls=targets.worker_urls or None,
                )  # fmt: skip
                result.notes += notes
            except Exception as exc:  # as above
                result.notes.append(f"sandbox phase failed: {type(exc).__name__}: {exc}")
            try:
                runs = min(cfg.safety_runs, 50) if cfg.quick else cfg.safety_runs
                result.safety = await asyncio.to_thread(safety_phase, runs, progress)
            except Exception as exc:  # as above
                result.notes.append(f"safety phase failed: {type(exc).__name__}: {exc}")
            if not targets.direct:  # issue 22: /v1/embeddings throughput, batch 1 vs 32
                try:
                    keys = {
                        "keys_path": cfg.out_dir / KEYS_FILE,
                        "admin_key": targets.admin_key,
                        "api_key": targets.api_key,
                    }
                    result.embeddings = await embeddings_phase(targets.url, progress, quick=cfg.quick, **keys)
                except Exception as exc:  # as above
                    result.notes.append(f"embeddings phase failed: {type(exc).__name__}: {exc}")
                try:  # issue 23: ingestion pages/s, search p50 (gateway, and in process on 10k chunks)
                    phase = retrieval_phase(targets.url, progress, model=cfg.model, quick=cfg.quick, **keys)
                    result.retrieval = await phase
                except Exception as exc:  # as above
                    result.notes.append(f"retrieval phase failed: {type(exc).__name__}: {exc}")
            result.notes.append(
                await structured_phase(phases.client, cfg.model, cfg.out_dir, progress, quick=cfg.quick)
            )
            result.notes.append(  # issue 48: n choices sharing the prompt's KV vs n separate requests
                await choices_phase(phases.client, cfg.model, cfg.out_dir, progress, quick=cfg.quick)
            )
        finally:
            await phases.close()


async def _goodput(cfg: BenchConfig, targets: Targets, progress: Progress) -> GoodputStats:
    keys = await asyncio.to_thread(
        ensure_eval_keys, targets.url, cfg.out_dir / KEYS_FILE, admin_key=targets.admin_key, tiers=tuple(Tier)
    )
    plan = GoodputPlan(
        concurrency=min(cfg.goodput_concurrency, 2) if cfg.quick else cfg.goodput_concurrency,
        requests=min(cfg.goodput_requests, 4) if cfg.quick else cfg.goodput_requests,
        max_tokens=cfg.goodput_max_tokens,
        aiperf=find_aiperf(cfg.aiperf),
        out_dir=cfg.out_dir,
        timeout_s=cfg.request_timeout_s,
    )
    return await goodput_phase(targets.url, keys, plan, progress)


def read_admin_key(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def stack_worker_key_of(data_dir: Path | None) -> str | None:
    """The worker key of the stack whose data dir is `data_dir` (None: FLEETCHAT_DATA_DIR's), if it made one."""
    from functions.local_stack.worker_key import presenting_stack_key
    from shared.settings import Settings

    settings = presenting_stack_key(Settings(data_dir=data_dir) if data_dir is not None else Settings())
    return settings.worker.api_key.get_secret_value() if settings.worker.api_key else None


def _resolve_targets(cfg: BenchConfig, result: BenchResult) -> tuple[Targets, LocalStack | None]:
    worker_urls = [cfg.worker_url] if cfg.worker_url else local_worker_urls(cfg.model)
    if cfg.direct_only:
        if not worker_urls:
            raise RuntimeError(f"direct_only needs a worker: pass worker_url (no local pool named {cfg.model!r})")
        result.notes.append("direct-only run: every phase talks to the worker itself; no gateway was measured.")
        key = stack_worker_key_of(None)
        return Targets(url=worker_urls[0], api_key=key, worker_urls=worker_urls, direct=True, worker_key=key), None
    stack = None
    if gateway_reachable(cfg.base_url):
        with console.status(f"waiting for {cfg.base_url}/healthz == 200"):
            wait_healthy(cfg.base_url, 300)
    elif cfg.start_stack:
        stack = start_local_stack(cfg.base_url, console)
        result.started_stack = True
        result.notes.append(
            f"no gateway was running at {cfg.base_url}: the benchmark started a local stack (fleetchat up, data dir "
            f"{stack.data_dir}) and stopped it afterwards; its numbers include no other traffic."
        )
    else:
        raise RuntimeError(f"no gateway answers at {cfg.base_url}")
    api_key = cfg.api_key or read_local_key(stack.key_path if stack is not None else None)
    admin_key = cfg.admin_key or read_admin_key(
        stack.data_dir / "admin_api_key" if stack is not None else local_admin_key_path()
    )
    if worker_urls and not all(worker_healthy(u) for u in worker_urls):
        result.notes.append(f"worker(s) {worker_urls} not reachable from here: no direct path, no worker metrics.")
        worker_urls = []
    elif not worker_urls:
        result.notes.append(f"no local worker for model {cfg.model!r} and no worker_url: no direct-path comparison.")
    worker_key = stack_worker_key_of(stack.data_dir if stack is not None else None)
    targets = Targets(cfg.base_url, api_key, worker_urls, direct=False, admin_key=admin_key, worker_key=worker_key)
    return targets, stack


def _print_checks(result: BenchResult) -> None:
    table = Table(title="fleetchat benchmark targets")
    for column in ("check", "value", "target", "result"):
        table.add_column(column)
    for check in result.checks:
        digits = 0 if check.unit == "" else 2
        table.add_row(check.name, fmt(check.value, digits, check.unit), check.target, mark(check.passed))
    console.print(table)


def run_benchmark(cfg: BenchConfig) -> BenchResult:
    """Run every phase, write out_dir/bench.json and out_dir/bench.md, print the markdown path; returns the result."""
    plan = make_plan(cfg)
    config = cfg.model_dump(mode="json")
    if config.get("api_key"):
        config["api_key"] = "***"
    config["plan"] = asdict(plan)
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    result = BenchResult(
        started_at=started.isoformat(timespec="seconds"),
        finished_at="",
        duration_s=0.0,
        config=config,
        machine=machine_info(),
        target_url=cfg.base_url,
        worker_url=None,
        started_stack=False,
    )
    stack: LocalStack | None = None
    if cfg.engine_phase:
        try:
            result.notes.append(engine_phase(cfg.out_dir, pool=cfg.model, quick=cfg.quick))
        except Exception as exc:  # the HTTP phases still run
            result.notes.append(f"engine phase failed: {type(exc).__name__}: {exc}")
    try:
        targets, stack = _resolve_targets(cfg, result)
        result.target_url = targets.url
        result.worker_url = targets.worker_urls[0] if targets.worker_urls else None
        if targets.worker_key:  # the phases' own gateways (and workers) present the stack's key, as its gateway does
            os.environ.setdefault(WORKER_KEY_ENV, targets.worker_key)
        console.print(f"benchmarking [bold]{targets.url}[/] (model {cfg.model}, max_tokens {plan.max_tokens})")
        asyncio.run(_measure(cfg, plan, targets, result))
    finally:
        if stack is not None:
            console.print("[yellow]stopping the local stack this benchmark started[/]")
            stack.stop()
    result.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
    result.duration_s = round(time.perf_counter() - t0, 1)
    result.checks = evaluate(result)
    json_path, md_path = write_reports(result, cfg.out_dir)
    _print_checks(result)
    console.print(f"JSON: {json_path}")
    print(f"markdown report: {md_path}")
    return result

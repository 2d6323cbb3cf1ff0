"""Benchmark phase: priority admission and brownout under a saturating free-tier load.

A gateway process of the phase's own (fresh SQLite data dir, the running workers of the model's pool) serves free
tenants that keep `free_per_place` x capacity streams open (a refused one retries after a second) and one enterprise
tenant that sends a request every `enterprise_interval_s`. Reported: each tier's TTFT (queue wait included) against
its SLO, refusals, the deepest queue, and when brownout switched on (from the load's start) and off (from its end),
read from the gateway's /metrics.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.progress import Progress

from functions.offline.bench import prompts
from functions.offline.bench.phases.phase_gateway import BenchGateway, spawn_gateway, wait_ready
from functions.offline.bench.prom import sample_value
from functions.offline.bench.results.priority_results import PriorityStats, TierLatency
from functions.offline.measure import stats
from functions.offline.measure.load import make_client, stream_chat
from shared.fleet.tables import policy_for
from shared.fleet.tiers import LimitOverrides, Tier

UNLIMITED = 1_000_000_000
POLL_S = 0.5
BROWNOUT_WINDOW_S = 10.0  # the phase's gateway: short enough to see brownout end within the phase
BROWNOUT_HOLD_S = 5.0
REQUEST_TIMEOUT_S = 300.0


@dataclass
class PriorityConfig:
    load_s: float = 45.0
    free_per_place: int = 3  # free streams per place in the pool: well past saturation
    free_tenants: int = 4
    enterprise_interval_s: float = 2.0
    max_tokens: int = 64  # free answers
    enterprise_max_tokens: int = 16
    # After the load: queued requests may still wait up to enterprise's bound (60 s), then the window and the hold.
    off_timeout_s: float = 60.0 + BROWNOUT_WINDOW_S + BROWNOUT_HOLD_S + 15.0


@dataclass
class _Observed:
    depth: list[float] = field(default_factory=list)
    on_at: float | None = None
    off_at: float | None = None


def admitted_prompts(count: int, tag: str = "prio-0-0") -> list[int]:
    """Indexes of `prompts.generation_messages` (with `tag`) the shipped safety pre-filter lets through: the phase
    measures capacity, not the safety gate (its classifier refuses a few of the benign prompts)."""
    from functions.safety.classifier.cascade import shipped_classifier
    from functions.safety.prefilter import PreFilter
    from shared.wire.schemas import ChatMessage

    gate = PreFilter(shipped_classifier())
    screened = (
        i
        for i in range(count * 4)
        if gate.check([ChatMessage.model_validate(m) for m in prompts.generation_messages(i, tag)]) is None
    )
    return [i for _, i in zip(range(count), screened, strict=False)]


def _tenants(data_dir: Path, free_tenants: int) -> tuple[list[str], str]:
    """Free tenants without rate limits or message cap (the phase measures capacity, not limits), and an enterprise
    one; returns their API keys."""
    from functions.accounts.operations import create_tenant_with_key
    from shared.settings import Settings
    from shared.storage.accounts import TenantChanges
    from shared.storage.factory import open_tenant_store

    big = LimitOverrides(
        key_rpm=UNLIMITED, key_tpm=UNLIMITED, tenant_rpm=UNLIMITED, tenant_tpm=UNLIMITED, message_cap=UNLIMITED
    )
    store = open_tenant_store(Settings(environment="local", data_dir=data_dir, accounts_store="sqlite"))
    try:
        free = []
        for i in range(free_tenants):
            tenant, minted = create_tenant_with_key(store, f"bench-free-{i}", Tier.FREE, "bench")
            store.update_tenant(tenant.id, TenantChanges(limits=big))
            free.append(minted.key)
        _, enterprise = create_tenant_with_key(store, "bench-enterprise", Tier.ENTERPRISE, "bench")
    finally:
        store.close()
    return free, enterprise.key


def _spawn(data_dir: Path, model: str, worker_urls: list[str]) -> BenchGateway:
    brownout = {
        "FLEETCHAT_BROWNOUT_WINDOW_S": str(BROWNOUT_WINDOW_S),
        "FLEETCHAT_BROWNOUT_HOLD_S": str(BROWNOUT_HOLD_S),
    }
    return spawn_gateway(data_dir, model, worker_urls, extra_env=brownout)


async def _metric(http: httpx.AsyncClient, url: str, name: str, **labels: str) -> float | None:
    try:
        text = (await http.get(f"{url}/metrics")).text
    except httpx.HTTPError:
        return None
    return sample_value(text, name, labels or None)


def _latency(tier: Tier, results: list[stats.RequestResult]) -> TierLatency:
    refused = [r for r in results if r.error is not None and r.error.startswith("HTTP 503")]
    others = [r.error for r in results if r.error is not None and not r.error.startswith("HTTP 503")]
    ttfts = [r.ttft_s for r in results if r.ok and r.ttft_s is not None]
    return TierLatency(
        tier=tier.value,
        requests=len(results),
        ok=sum(1 for r in results if r.ok),
        refused=len(refused),
        other_errors=len(others),
        ttft_p50_ms=stats.to_ms(stats.percentile(ttfts, 50)),
        ttft_p95_ms=stats.to_ms(stats.percentile(ttfts, 95)),
        slo_ttft_p95_ms=policy_for(tier).slo.ttft_p95_s * 1000,
        error_samples=list(dict.fromkeys(r.error for r in results if r.error))[: stats.MAX_ERROR_SAMPLES],
    )


async def _drive(
    gateway: str, model: str, free_keys: list[str], enterprise_key: str, cfg: PriorityConfig, progress: Progress
) -> PriorityStats:
    async with httpx.AsyncClient(timeout=10.0) as http:
        capacity = await _metric(http, gateway, "fleetchat_gateway_pool_capacity", pool=model)
        places = int(capacity or 8)
        concurrency = cfg.free_per_place * places
        free_clients = [make_client(gateway, key, REQUEST_TIMEOUT_S) for key in free_keys]
        enterprise_client = make_client(gateway, enterprise_key, REQUEST_TIMEOUT_S)
        usable = await asyncio.to_thread(admitted_prompts, 24)
        free_results: list[stats.RequestResult] = []
        enterprise_results: list[stats.RequestResult] = []
        observed = _Observed()
        began = time.monotonic()
        stop_at = began + cfg.load_s
        task = progress.add_task(f"priority: {concurrency} free streams + enterprise trickle (s)", total=cfg.load_s)

        async def free_stream(i: int) -> None:
            client = free_clients[i % len(free_clients)]
            n = 0
            while time.monotonic() < stop_at:
                messages = prompts.generation_messages(usable[(i + n) % len(usable)], f"prio-{i}-{n}")
                result = await stream_chat(client, model, messages, cfg.max_tokens)
                free_results.append(result)
                n += 1
                if result.error is not None:
                    await asyncio.sleep(1.0)  # refused: try again shortly, as a retrying client would

        async def enterprise_request(n: int) -> None:
            messages = prompts.generation_messages(usable[n % len(usable)], f"prio-e-{n}")
            enterprise_results.append(await stream_chat(enterprise_client, model, messages, cfg.enterprise_max_tokens))

        async def enterprise_trickle() -> None:
            """Open loop: one request every interval, whether or not the previous one has finished."""
            sent: list[asyncio.Task[None]] = []
            while time.monotonic() < stop_at:
                sent.append(asyncio.create_task(enterprise_request(len(sent))))
                await asyncio.sleep(cfg.enterprise_interval_s)
            await asyncio.gather(*sent)

        async def watch() -> None:
            """Poll /metrics through the load and after it, until brownout is off again (or the phase gives up)."""
            give_up = stop_at + cfg.off_timeout_s
            while time.monotonic() < give_up:
                now = time.monotonic()
                progress.update(task, completed=min(now - began, cfg.load_s))
                active = await _metric(http, gateway, "fleetchat_gateway_brownout_active")
                depth = await _metric(http, gateway, "fleetchat_gateway_queue_depth", pool=model)
                if depth is not None:
                    observed.depth.append(depth)
                if active == 1 and observed.on_at is None:
                    observed.on_at = now - began
                if active == 0 and observed.on_at is not None and now >= stop_at:
                    observed.off_at = now - stop_at
                    return
                await asyncio.sleep(POLL_S)

        try:
            watcher = asyncio.create_task(watch())
            await asyncio.gather(*(free_stream(i) for i in range(concurrency)), enterprise_trickle())
            await watcher
        finally:
            for client in (*free_clients, enterprise_client):
                await client.close()
        transitions_on = await _metric(http, gateway, "fleetchat_gateway_brownout_transitions", to="on")
        transitions_off = await _metric(http, gateway, "fleetchat_gateway_brownout_transitions", to="off")
    notes = []
    if not enterprise_results:
        notes.append("no enterprise request was sent (the load ended first)")
    return PriorityStats(
        model=model,
        capacity=capacity,
        load_s=cfg.load_s,
        free_concurrency=concurrency,
        free_tenants=len(free_keys),
        enterprise_interval_s=cfg.enterprise_interval_s,
        enterprise=_latency(Tier.ENTERPRISE, enterprise_results),
        free=_latency(Tier.FREE, free_results),
        max_queue_depth=max(observed.depth) if observed.depth else None,
        brownout_on_after_s=None if observed.on_at is None else round(observed.on_at, 1),
        brownout_off_after_s=None if observed.off_at is None else round(observed.off_at, 1),
        brownout_transitions_on=transitions_on,
        brownout_transitions_off=transitions_off,
        notes=notes,
    )


async def priority_phase(
    model: str, worker_urls: list[str], cfg: PriorityConfig, progress: Progress
) -> tuple[PriorityStats | None, list[str]]:
    """The phase, or (None, a note) where it cannot run (no worker, or a model the free tier may not use)."""
    if not worker_urls:
        return None, [f"no reachable local worker for model {model!r}: the priority phase was skipped."]
    if model not in policy_for(Tier.FREE).pools:
        return None, [f"the free tier may not use {model!r}: the priority phase was skipped (run it with mini)."]
    start = progress.add_task("priority: start a gateway of its own", total=1)
    with tempfile.TemporaryDirectory(prefix="fleetchat-bench-priority-") as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir()
        free_keys, enterprise_key = _tenants(data_dir, cfg.free_tenants)
        gateway = _spawn(data_dir, model, worker_urls)
        try:
            async with httpx.AsyncClient(timeout=10.0) as http:
                await wait_ready(http, gateway)
            progress.advance(start)
            result = await _drive(gateway.url, model, free_keys, enterprise_key, cfg, progress)
        finally:
            gateway.stop()
    return result, []

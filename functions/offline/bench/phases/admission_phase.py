"""Benchmark phase: admission control. What admit + settle + the ledger write add to a request on SQLite (in-process),
and whether two real gateway replicas on one shared store admit exactly the RPM limit in a one-minute window."""

from __future__ import annotations

import asyncio
import secrets
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
from rich.progress import Progress

from functions.offline.bench.phases.phase_gateway import BenchGateway, spawn_gateway, tier_for, wait_ready
from functions.offline.bench.results.records import (
    AdmissionCostStats,
    AdmissionLimitStats,
    AdmissionReplicaStats,
    AdmissionStats,
)
from functions.offline.measure import stats
from shared.fleet.tables import limits_for
from shared.fleet.tiers import LimitOverrides

WINDOW_S = 60
WINDOW_MARGIN_S = 25.0  # start the burst with at least this much of its one-minute window left
SEND_CUTOFF_S = 2.0  # send nothing this close to the window's end: the gateway must admit it in the same window
BURST_CONCURRENCY = 8
REQUEST_TIMEOUT_S = 120.0
MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")
UNLIMITED = 1_000_000_000  # limits the cost phase never reaches: every timed request takes the admitted path

SYSTEM_TEXT = (
    "You are a concise assistant for a cooking site. Answer in plain sentences, name quantities in grams and "
    "millilitres, and say so when a step depends on the altitude or the cookware."
)
USER_TEXT = (
    "I have a cup of red lentils, an onion, two cloves of garlic and a tin of tomatoes. How long should the lentils "
    "simmer, and do I salt them at the start or near the end?"
)


def filesystem_of(path: Path) -> str | None:
    """The type of the filesystem holding `path` (Linux: from /proc/self/mounts), or None when unknown."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    resolved, best, fstype = str(path.resolve()), "", None
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fstype = point, fields[2]
    return fstype


def admission_cost_phase(requests: int, progress: Progress, model: str = "mini") -> AdmissionCostStats:
    """Time admit() + settle() + LedgerWriter.record() per request on a fresh SQLite file: the gateway's added path."""
    from functions.accounts.operations import create_tenant_with_key
    from functions.app import context_tokens
    from functions.control.admission import Admission
    from functions.spooled_writer import LedgerWriter
    from shared.settings import Settings
    from shared.storage.factory import open_ledger, open_rate_limits, open_tenant_store
    from shared.storage.ledger import LedgerEntry, Outcome
    from shared.storage.timestamps import utc_now
    from shared.wire.schemas import ChatMessage

    task = progress.add_task("admission + ledger write (sqlite, in-process)", total=requests)
    tier = tier_for(model)
    big = LimitOverrides(key_rpm=UNLIMITED, key_tpm=UNLIMITED, tenant_rpm=UNLIMITED, tenant_tpm=UNLIMITED)
    limits = limits_for(tier, big)
    messages = [ChatMessage(role="system", content=SYSTEM_TEXT), ChatMessage(role="user", content=USER_TEXT)]
    totals: list[float] = []
    parts: dict[str, list[float]] = {"admit": [], "settle": [], "ledger": []}
    with tempfile.TemporaryDirectory(prefix="fleetchat-bench-admission-") as tmp:
        settings = Settings(environment="local", data_dir=Path(tmp), accounts_store="sqlite")
        tenants = open_tenant_store(settings)
        try:
            tenant, minted = create_tenant_with_key(tenants, "bench-admission", tier, "bench")
        finally:
            tenants.close()
        rate_limits, ledger = open_rate_limits(settings), open_ledger(settings)
        try:
            admission = Admission(rate_limits, context_tokens(settings))
            writer = LedgerWriter(ledger, settings.data_dir / "ledger-spool.jsonl")
            for _ in range(requests):
                start = time.perf_counter()
                reservation = admission.admit(tenant.id, minted.record.id, limits, messages, 64, model)
                admitted = time.perf_counter()
                admission.settle(reservation, 90)
                settled = time.perf_counter()
                writer.record(
                    LedgerEntry(
                        request_id=f"req_{uuid.uuid4().hex}",
                        tenant_id=tenant.id,
                        key_id=minted.record.id,
                        model=model,
                        prompt_tokens=60,
                        completion_tokens=30,
                        cached_tokens=0,
                        outcome=Outcome.COMPLETED,
                        created_at=utc_now(),
                    )
                )
                end = time.perf_counter()
                totals.append(end - start)
                parts["admit"].append(admitted - start)
                parts["settle"].append(settled - admitted)
                parts["ledger"].append(end - settled)
                progress.advance(task)
        finally:
            rate_limits.close()
            ledger.close()
        fstype = filesystem_of(Path(tmp))
    return AdmissionCostStats(
        store=f"sqlite (WAL; ledger synchronous=FULL, counters NORMAL) on {fstype or 'unknown filesystem'}",
        requests=requests,
        p50_ms=stats.to_ms(stats.percentile(totals, 50)),
        p99_ms=stats.to_ms(stats.percentile(totals, 99)),
        max_ms=stats.to_ms(max(totals)),
        admit_p50_ms=stats.to_ms(stats.median(parts["admit"])),
        settle_p50_ms=stats.to_ms(stats.median(parts["settle"])),
        ledger_p50_ms=stats.to_ms(stats.median(parts["ledger"])),
    )


def _make_tenant(data_dir: Path, model: str, limit_rpm: int) -> str:
    """A tenant whose key and tenant RPM are both `limit_rpm`, in the replicas' store; returns its API key."""
    from functions.accounts.operations import create_tenant_with_key
    from shared.settings import Settings
    from shared.storage.accounts import TenantChanges
    from shared.storage.factory import open_tenant_store

    store = open_tenant_store(Settings(environment="local", data_dir=data_dir, accounts_store="sqlite"))
    try:
        tenant, minted = create_tenant_with_key(store, "bench-admission-limit", tier_for(model), "bench")
        store.update_tenant(tenant.id, TenantChanges(limits=LimitOverrides(key_rpm=limit_rpm, tenant_rpm=limit_rpm)))
    finally:
        store.close()
    return minted.key


async def _wait_for_window(progress: Progress, margin_s: float = WINDOW_MARGIN_S) -> None:
    """Sleep into the next fixed one-minute window when less than `margin_s` of the current one is left."""
    left = WINDOW_S - time.time() % WINDOW_S
    if left >= margin_s:
        return
    wait = left + 0.5
    task = progress.add_task("admission: waiting for a fresh one-minute window (s)", total=wait)
    began = time.monotonic()
    while (elapsed := time.monotonic() - began) < wait:
        progress.update(task, completed=elapsed)
        await asyncio.sleep(min(1.0, wait - elapsed))
    progress.update(task, completed=wait)


NOT_SENT = "not sent"


async def _burst(
    http: httpx.AsyncClient,
    urls: list[str],
    api_key: str,
    model: str,
    total: int,
    send_until: float,
    progress: Progress,
    task: int,
) -> list[tuple[int, str]]:
    """`total` chat requests (max_tokens=1), request i to replica i % len(urls), at most BURST_CONCURRENCY at once.

    A request whose turn comes after `send_until` (wall clock) is not sent: it would be admitted in the next window.
    Returns (replica index, status code, exception name or NOT_SENT) per request.
    """
    semaphore = asyncio.Semaphore(BURST_CONCURRENCY)
    headers = {"Authorization": f"Bearer {api_key}"}

    async def one(i: int) -> tuple[int, str]:
        body = {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": f"Say hi ({i})."}]}
        async with semaphore:
            if time.time() > send_until:
                outcome = NOT_SENT
            else:
                try:
                    url = f"{urls[i % len(urls)]}/v1/chat/completions"
                    outcome = str((await http.post(url, json=body, headers=headers)).status_code)
                except httpx.HTTPError as exc:
                    outcome = type(exc).__name__
        progress.advance(task)
        return i % len(urls), outcome

    return await asyncio.gather(*(one(i) for i in range(total)))


def summarize_burst(
    limit_rpm: int, urls: list[str], outcomes: list[tuple[int, str]], wall_s: float
) -> AdmissionLimitStats:
    replicas = []
    for index, url in enumerate(urls):
        counts = Counter(outcome for replica, outcome in outcomes if replica == index and outcome != NOT_SENT)
        replicas.append(
            AdmissionReplicaStats(
                replica=url,
                sent=sum(counts.values()),
                accepted=counts["200"],
                refused=counts["429"],
                other=sum(n for outcome, n in counts.items() if outcome not in ("200", "429")),
            )
        )
    other = Counter(outcome for _, outcome in outcomes if outcome not in ("200", "429", NOT_SENT))
    return AdmissionLimitStats(
        limit_rpm=limit_rpm,
        concurrency=BURST_CONCURRENCY,
        planned=len(outcomes),
        sent=sum(r.sent for r in replicas),
        accepted=sum(r.accepted for r in replicas),
        refused=sum(r.refused for r in replicas),
        other=dict(other),
        replicas=replicas,
        wall_s=round(wall_s, 3),
    )


async def replica_limit_phase(
    model: str, worker_urls: list[str], limit_rpm: int, progress: Progress
) -> AdmissionLimitStats:
    """Two gateway processes on one fresh SQLite data dir, one tenant limited to `limit_rpm`: fire 3x the limit,
    alternating between the replicas, inside one fixed window; count what each admitted and refused."""
    total = 3 * limit_rpm
    start_task = progress.add_task("admission: start 2 gateway replicas on one store", total=2)
    with tempfile.TemporaryDirectory(prefix="fleetchat-bench-replicas-") as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir()
        api_key = _make_tenant(data_dir, model, limit_rpm)  # also creates the schema before either replica opens it
        session_secret = secrets.token_urlsafe(48)
        gateways: list[BenchGateway] = []
        try:
            async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as http:
                for _ in range(2):
                    gateways.append(spawn_gateway(data_dir, model, worker_urls, session_secret=session_secret))
                for gateway in gateways:
                    await wait_ready(http, gateway)
                    progress.advance(start_task)
                await _wait_for_window(progress)
                urls = [g.url for g in gateways]
                task = progress.add_task(f"admission: 2 replicas, limit {limit_rpm} RPM, {total} requests", total=total)
                window_end = (time.time() // WINDOW_S + 1) * WINDOW_S
                began = time.perf_counter()
                outcomes = await _burst(http, urls, api_key, model, total, window_end - SEND_CUTOFF_S, progress, task)
                wall_s = time.perf_counter() - began
        finally:
            for gateway in gateways:
                gateway.stop()
    return summarize_burst(limit_rpm, urls, outcomes, wall_s)


async def admission_phase(
    model: str, worker_urls: list[str], requests: int, limit_rpm: int, progress: Progress
) -> tuple[AdmissionStats, list[str]]:
    """Both parts; a failure of the replica part becomes a note and keeps the in-process numbers."""
    notes: list[str] = []
    cost = await asyncio.to_thread(admission_cost_phase, requests, progress, model)
    if cost.store.endswith(MEMORY_FILESYSTEMS):
        notes.append(
            f"the admission cost was timed on a temp dir in memory ({cost.store}): no disk sync is in it, so it is "
            f"lower than on a disk-backed data dir (set TMPDIR to a directory on disk)."
        )
    limit = None
    if not worker_urls:
        notes.append(f"no reachable local worker for model {model!r}: the two-replica admission check was skipped.")
    else:
        try:
            limit = await replica_limit_phase(model, worker_urls, limit_rpm, progress)
        except Exception as exc:  # the gateway processes failing must not lose the in-process numbers
            notes.append(f"two-replica admission phase failed: {type(exc).__name__}: {exc}")
    if limit is not None and limit.sent < limit.planned:
        notes.append(
            f"two-replica burst: {limit.planned - limit.sent} of {limit.planned} requests were not sent (the window "
            f"was about to end; slow answers from the worker hold the concurrency slots)."
        )
    if limit is not None and limit.sent <= limit.limit_rpm:
        notes.append("two-replica burst: no more requests than the limit were sent in the window: not checked.")
    return AdmissionStats(cost=cost, limit=limit), notes

"""`fleetchat chaos`: start the fleet, run aiperf through its load balancer while the faults fire, audit the books and
write the report."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

import httpx
from rich.console import Console

from functions.chat.streams.resumable import STREAM_TAKEOVERS
from functions.control.fleet_sync import FLEET_SYNC_FAILURES
from functions.metrics.failover import CONTINUATIONS
from functions.offline.bench import aiperf_check, prompts
from functions.offline.bench.machine import machine_info
from functions.offline.bench.phases.priority_phase import admitted_prompts
from functions.offline.bench.prom import sample_value
from functions.offline.chaos import aiperf_load
from functions.offline.chaos.audit import BooksAuditor
from functions.offline.chaos.faults import FaultSchedule
from functions.offline.chaos.fleet import local_fleet
from functions.offline.chaos.plan import ChaosConfig
from functions.offline.chaos.report import ChaosResult, write

console = Console(stderr=True)
WARM_REQUESTS = 2


def _require(cfg: ChaosConfig) -> str:
    """The aiperf executable, or a SystemExit saying what is missing."""
    aiperf = aiperf_check.find_aiperf(cfg.aiperf)
    if aiperf is None:
        raise SystemExit(
            "fleetchat chaos drives aiperf: `make chaos` installs it from requirements/aiperf.txt into .venv-aiperf "
            "and runs this with --aiperf .venv-aiperf/bin/aiperf (or set FLEETCHAT_AIPERF)"
        )
    for binary in ("redis-server", "haproxy"):
        if shutil.which(binary) is None and shutil.which(binary, path="/usr/sbin:/sbin") is None:
            raise SystemExit(f"fleetchat chaos runs Debian's {binary}: sudo apt-get install {binary.split('-')[0]}")
    return aiperf


# What the gateways did about the faults, summed over the gateways at the end of the run (a restarted gateway counts
# from its restart): (metric, label, values).
COUNTERS = [
    (STREAM_TAKEOVERS, "outcome", ("finished", "closed", "failed")),
    (CONTINUATIONS, "outcome", ("continued", "fallback", "failed")),
    (FLEET_SYNC_FAILURES, None, ()),
]


def fleet_counters(gateway_urls: list[str]) -> dict[str, float]:
    texts = []
    for url in gateway_urls:
        with contextlib.suppress(httpx.HTTPError):
            texts.append(httpx.get(f"{url}/metrics", timeout=10).text)
    out: dict[str, float] = {}
    if not texts:
        return out  # no gateway answered: nothing counted, rather than zeros
    for name, label, values in COUNTERS:
        for key, labels in [(f"{name}{{{label}={v}}}", {label: v}) for v in values] if label else [(name, None)]:
            out[key] = sum(sample_value(text, name, labels) or 0.0 for text in texts)
    return out


def _dataset(path: Path, count: int) -> Path:
    """aiperf's single-turn dataset: distinct everyday questions the safety pre-filter admits."""
    tag = "chaos"
    messages = [prompts.generation_messages(i, tag) for i in admitted_prompts(count, tag)]
    return aiperf_check.write_dataset(path, messages)


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds like Ctrl-C: the fleet and its redis-server are stopped on the way out


def run_chaos(cfg: ChaosConfig) -> ChaosResult:
    aiperf = _require(cfg)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    tokenizer = aiperf_check.tokenizer_dir(cfg.out_dir / "tokenizer")
    dataset = _dataset(cfg.out_dir / "prompts.jsonl", cfg.requests)
    artifacts = cfg.out_dir / "aiperf"
    shutil.rmtree(artifacts, ignore_errors=True)
    faults = cfg.fault_plan()
    starting = f"starting {cfg.gateways} gateways and {cfg.replicas} {cfg.model} replicas behind HAProxy"
    with tempfile.TemporaryDirectory(prefix="fleetchat-chaos-") as tmp, contextlib.ExitStack() as stack:
        with console.status(starting):
            fleet = stack.enter_context(
                local_fleet(Path(tmp), model=cfg.model, gateways=cfg.gateways, replicas=cfg.replicas)
            )
        warm = aiperf_load.command(
            aiperf, url=fleet.url, api_key=fleet.api_key, model=cfg.model, dataset=dataset, tokenizer=tokenizer,
            concurrency=WARM_REQUESTS, requests=WARM_REQUESTS, max_tokens=8, artifact_dir=cfg.out_dir / "warm",
        )  # fmt: skip
        with console.status("warming up (two short requests through the balancer)"):
            aiperf_load.run(warm, cfg.out_dir / "aiperf-warm.log", 600)
        cmd = aiperf_load.command(
            aiperf, url=fleet.url, api_key=fleet.api_key, model=cfg.model, dataset=dataset, tokenizer=tokenizer,
            concurrency=cfg.concurrency, requests=cfg.requests, max_tokens=cfg.max_tokens, artifact_dir=artifacts,
        )  # fmt: skip
        schedule = FaultSchedule(
            faults, fleet, on_event=lambda e: console.print(f"  {e.at_s:6.1f} s  {e.kind}: {e.detail}")
        )
        t0_ns, t0 = time.time_ns(), time.monotonic()
        schedule.begin(t0)
        plan = ", ".join(f"{f.kind} {f.target} at {f.at_s:g} s" for f in faults)
        with console.status(f"aiperf: {cfg.requests} requests at concurrency {cfg.concurrency}; faults: {plan}"):
            exit_code = aiperf_load.run(cmd, cfg.out_dir / "aiperf.log", cfg.load_timeout_s)
        load_s = time.monotonic() - t0
        schedule.cancel()
        schedule.join(timeout=60)
        requests = aiperf_load.read_requests(artifacts, t0_ns)
        with console.status(f"auditing {len(requests)} requests: read back, resume, ledger, stored answer"):
            fleet.wait_healthy(600)  # every restarted process back: the audit reads through the balancer
            audits = BooksAuditor(fleet.url, fleet.api_key, fleet.db_path).audit(requests)
            counters = fleet_counters(fleet.gateway_urls)
        shutil.copytree(fleet.data_dir / "logs", cfg.out_dir / "fleet-logs", dirs_exist_ok=True)
    notes = [f"fault at {f.at_s:g} s not reached: the load ended at {load_s:.0f} s" for f in faults if f.at_s > load_s]
    if not requests:
        notes.append(f"aiperf wrote no records (exit {exit_code}): see {cfg.out_dir / 'aiperf.log'}")
    result = ChaosResult(
        started_at=started,
        config=json.loads(cfg.model_dump_json(exclude={"out_dir", "aiperf"})),
        machine=machine_info(),
        aiperf_exit=exit_code,
        load_s=load_s,
        faults=schedule.events,
        planned_faults=len(faults),
        fault_errors=schedule.errors,
        requests=requests,
        audits=audits,
        counters=counters,
        notes=notes,
    )
    path = write(result, cfg.out_dir)
    console.print(f"{'PASS' if result.passed else 'FAIL'}: {dict(result.verdicts())}; report: {path}")
    return result

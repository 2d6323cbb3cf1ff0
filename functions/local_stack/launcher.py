"""`fleetchat up`: take the data dir's lock, start a supervised worker per pool replica, wait until they are healthy,
then serve the gateway; on SIGINT/SIGTERM (or any error) stop every worker before exiting."""

from __future__ import annotations

import json
import signal
import sys
import time
from types import FrameType

import uvicorn
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from functions.accounts.private_files import write_private
from functions.accounts.sessions import load_or_create_secret
from functions.app import create_app
from functions.local_stack.balancer import balancer_command, haproxy_binary, haproxy_config
from functions.local_stack.config_cli import configured_or_exit
from functions.local_stack.local_tenant import ensure_local_admin_key, ensure_local_key
from functions.local_stack.stack_lock import (
    StackLock,
    StackStartRefused,
    clean_orphan_workers,
    new_state,
    refuse_busy_ports,
)
from functions.local_stack.supervisor import WorkerSpec, WorkerSupervisor
from functions.local_stack.worker_key import WORKER_KEY_ENV, stack_worker_key, with_worker_key
from shared.settings import Settings
from shared.storage.factory import open_tenant_store

console = Console(stderr=True)


class StopRequested(Exception):
    """SIGTERM (or SIGHUP) arrived: unwind through the `finally` that stops the workers."""


def worker_command(settings: Settings, pool: str, port: int) -> list[str]:
    if settings.local_worker_command:
        fill = {"python": sys.executable, "pool": pool, "port": str(port)}
        return [part.format(**fill) for part in settings.local_worker_command]
    return [sys.executable, "-m", "functions.cli", "worker", "--pool", pool, "--port", str(port), "--quiet"]


def embedding_worker_command(pool: str, port: int, rerank_pools: list[str] | None = None) -> list[str]:
    # Always the real worker (a 90 MB model that loads in seconds); FLEETCHAT_EMBEDDING_POOLS=[] starts none. It also
    # serves the fused rank of the re-rank pools that name it as their local worker.
    command = [sys.executable, "-m", "functions.cli", "embedding-worker", "--pool", pool, "--port", str(port)]
    for rerank in rerank_pools or []:
        command += ["--rerank", rerank]
    return [*command, "--quiet"]


def worker_specs(settings: Settings) -> list[WorkerSpec]:
    log_dir = settings.data_dir / "logs"
    specs = []
    for pool, urls in settings.local_worker_urls().items():
        for i, url in enumerate(urls):
            port = int(url.rsplit(":", 1)[1])
            log_path = log_dir / f"worker-{pool}-{i}.log"
            command = worker_command(settings, pool, port)
            specs.append(WorkerSpec(pool=pool, index=i, port=port, command=command, log_path=log_path))
    for pool, urls in settings.local_embedding_worker_urls().items():  # issue 22: the embedding workers
        port = int(urls[0].rsplit(":", 1)[1])
        reranks = [name for name, served in settings.local_rerank_worker_urls().items() if served == urls]
        command = embedding_worker_command(pool, port, reranks)
        log_path = log_dir / f"worker-{pool}-0.log"
        specs.append(WorkerSpec(pool=pool, index=0, port=port, command=command, log_path=log_path))
    return specs


def fleet_specs(settings: Settings, binary: str) -> list[WorkerSpec]:
    """With more than one gateway: a `fleetchat gateway` process per gateway port, and HAProxy on the stack's port in
    front of them (its configuration written to the data dir). With one: none (the gateway runs in this process)."""
    ports = settings.local_gateway_ports()
    if not ports:
        return []
    log_dir = settings.data_dir / "logs"
    specs = [
        WorkerSpec(
            pool="gateway",
            index=i,
            port=port,
            command=gateway_command(settings, port),
            log_path=log_dir / f"gateway-{i}.log",
        )
        for i, port in enumerate(ports)
    ]
    config = settings.data_dir / "haproxy.cfg"
    text = haproxy_config(
        settings.host, settings.port, ports, stream_timeout_s=stream_timeout(settings),
        max_body_bytes=settings.max_body_bytes,
    )  # fmt: skip
    write_private(config, text)
    balancer = WorkerSpec(
        pool="balancer", index=0, port=settings.port, command=balancer_command(config, binary),
        log_path=log_dir / "balancer.log",
    )  # fmt: skip
    return [*specs, balancer]


def gateway_command(settings: Settings, port: int) -> list[str]:
    return [sys.executable, "-m", "functions.cli", "gateway", "--port", str(port), "--data-dir", str(settings.data_dir)]


def stream_timeout(settings: Settings) -> float:
    """How long the balancer lets a request last: the gateway's longest wait on a worker, and a margin."""
    return settings.worker.timeout_s + 60


def gateway_env(settings: Settings) -> dict[str, str]:
    """What the gateway processes of a local fleet need to find this stack's workers (they take every other setting
    from the same environment and data dir)."""
    if settings.gateways == 1:
        return {}
    return {
        "FLEETCHAT_WORKER_URLS": json.dumps(settings.local_worker_urls()),
        "FLEETCHAT_EMBEDDING_WORKER_URLS": json.dumps(settings.local_embedding_worker_urls()),
        "FLEETCHAT_RERANK_WORKER_URLS": json.dumps(settings.local_rerank_worker_urls()),
        "FLEETCHAT_POOLS": json.dumps(settings.pools),
    }


def wait_healthy(supervisor: WorkerSupervisor, specs: list[WorkerSpec], timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task("loading models in the workers", total=len(specs))
        while True:
            supervisor.check_startup()
            healthy = supervisor.healthy()
            progress.update(task, completed=len(healthy))
            if len(healthy) == len(specs):
                return
            if time.monotonic() > deadline:
                pending = sorted(s.name for s in specs if s.name not in healthy)
                raise TimeoutError(f"workers not healthy after {timeout_s:.0f}s: {pending}")
            time.sleep(0.25)


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise StopRequested(signal.Signals(signum).name)


def run_local_stack(settings: Settings) -> None:
    settings = configured_or_exit(settings)  # a bad operator config file stops here, before any worker starts
    # Python's default SIGTERM kills the process on the spot, skipping the `finally` below (and uvicorn re-raises the
    # signal after its own graceful shutdown): turned into an exception, SIGTERM unwinds like Ctrl-C does.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_stop)
    lock = StackLock(settings.data_dir)
    try:
        _run_locked(settings, lock)
    except StackStartRefused as refused:
        console.print(f"[bold red]fleetchat up refused:[/] {refused}")
        raise SystemExit(1) from None
    except (KeyboardInterrupt, StopRequested) as stop:
        console.print(f"fleetchat stopped ({str(stop) or 'SIGINT'}); its workers are stopped")


def _run_locked(settings: Settings, lock: StackLock) -> None:
    previous = lock.acquire()
    try:
        binary = haproxy_binary(settings.balancer_binary) if settings.gateways > 1 else ""
        specs = [*worker_specs(settings), *fleet_specs(settings, binary)]
        refuse_busy_ports({settings.port: "the gateway"})
        cleaned = clean_orphan_workers(specs, previous)
        for line in cleaned:
            console.print(f"[yellow]{line}[/]")
        if previous is not None and not cleaned:
            console.print(
                f"[yellow]an earlier `fleetchat up` (pid {previous.supervisor_pid}) on this data dir did not stop "
                "cleanly; none of its workers is left[/]"
            )
        refuse_busy_ports({s.port: f"worker {s.name}" for s in specs})
        _serve(settings, lock, specs)
    finally:
        lock.release()


def _serve(settings: Settings, lock: StackLock, specs: list[WorkerSpec]) -> None:
    store = open_tenant_store(settings)
    key = ensure_local_key(store, settings.local_key_path, settings.local_tenant_tier)
    ensure_local_admin_key(store, settings.local_admin_key_path)
    worker_key = stack_worker_key(settings)  # workers answer only this stack's gateway
    settings = with_worker_key(settings, worker_key)
    load_or_create_secret(settings.data_dir / "session_secret")  # before several gateways could race to make it
    supervisor = WorkerSupervisor(
        specs,
        on_pids=lambda pids: lock.write_state(new_state(settings.port, specs, pids)),
        env={WORKER_KEY_ENV: worker_key, **gateway_env(settings)},
    )
    try:
        supervisor.start()
        wait_healthy(supervisor, specs)
        supervisor.supervise()
        url = f"http://{settings.host}:{settings.port}"
        console.print(f"[bold green]fleetchat is up[/] at [bold]{url}[/]  (OpenAI base_url: {url}/v1)")
        console.print(f"local API key: [bold]{key}[/]  (kept in {settings.local_key_path}, mode 0600)")
        console.print(f"admin API key (for /admin/v1): in {settings.local_admin_key_path} (mode 0600)")
        console.print(f"pools: {', '.join(settings.pools)}; worker logs in {settings.data_dir / 'logs'}")
        console.print("workers are supervised: one that exits is restarted (see docs/operations.md)")
        if settings.gateways > 1:
            gateways = ", ".join(str(port) for port in settings.local_gateway_ports())
            console.print(
                f"{settings.gateways} gateways (ports {gateways}) behind HAProxy; its log in logs/balancer.log"
            )
            while True:  # the supervisor's thread does the work; Ctrl-C or SIGTERM ends this wait
                time.sleep(1)
        uvicorn.run(create_app(settings, store=store), host=settings.host, port=settings.port, log_level="warning")
    finally:
        # A second Ctrl-C or SIGTERM while the workers stop must not cut the stop short (the grace period bounds it).
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        supervisor.stop()
        store.close()

"""`fleetchat up`: start one worker process per pool replica, wait until they are healthy, then serve the gateway."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import uvicorn
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from functions.app import create_app
from functions.local_tenant import ensure_local_admin_key, ensure_local_key
from shared.settings import Settings
from shared.storage.factory import open_tenant_store

console = Console(stderr=True)


def worker_command(pool: str, port: int) -> list[str]:
    return [sys.executable, "-m", "functions.cli", "worker", "--pool", pool, "--port", str(port), "--quiet"]


def start_workers(settings: Settings, log_dir: Path) -> list[subprocess.Popen[bytes]]:
    log_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    for pool, urls in settings.local_worker_urls().items():
        for i, url in enumerate(urls):
            port = int(url.rsplit(":", 1)[1])
            log = open(log_dir / f"worker-{pool}-{i}.log", "ab")  # noqa: SIM115 - owned by the child for its life
            procs.append(subprocess.Popen(worker_command(pool, port), stdout=log, stderr=subprocess.STDOUT))
    return procs


def wait_healthy(urls: list[str], procs: list[subprocess.Popen[bytes]], timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task("loading models in the workers", total=len(urls))
        pending = set(urls)
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers not healthy after {timeout_s:.0f}s: {sorted(pending)}")
            dead = [p for p in procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"a worker exited during start-up (code {dead[0].returncode}); see its log")
            for url in list(pending):
                try:
                    if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                        pending.discard(url)
                        progress.advance(task)
                except httpx.HTTPError:
                    pass
            time.sleep(0.5)


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def run_local_stack(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = open_tenant_store(settings)
    key = ensure_local_key(store, settings.local_key_path, settings.local_tenant_tier)
    ensure_local_admin_key(store, settings.local_admin_key_path)
    procs = start_workers(settings, settings.data_dir / "logs")
    try:
        wait_healthy([u for urls in settings.local_worker_urls().values() for u in urls], procs)
        url = f"http://{settings.host}:{settings.port}"
        console.print(f"[bold green]fleetchat is up[/] at [bold]{url}[/]  (OpenAI base_url: {url}/v1)")
        console.print(f"local API key: [bold]{key}[/]  (kept in {settings.local_key_path}, mode 0600)")
        console.print(f"admin API key (for /admin/v1): in {settings.local_admin_key_path} (mode 0600)")
        console.print(f"pools: {', '.join(settings.pools)}; worker logs in {settings.data_dir / 'logs'}")
        uvicorn.run(create_app(settings, store=store), host=settings.host, port=settings.port, log_level="warning")
    finally:
        stop_workers(procs)
        store.close()

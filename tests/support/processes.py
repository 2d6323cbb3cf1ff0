"""Start and stop real fleetchat processes (workers, gateway) on free loopback ports for the tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_ports(count: int) -> int:
    """The first of `count` consecutive free loopback ports (a pool's replicas, or the next pools, listen on the
    ports after a worker base port)."""
    while True:
        first = free_port()
        try:
            with contextlib.ExitStack() as held:
                for port in range(first + 1, first + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first


def wait_http_ok(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} not healthy after {timeout_s}s:\n{log.read_text()[-3000:]}")


@dataclass
class ProcessGroup:
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - handed to the child
        proc = subprocess.Popen(
            [sys.executable, "-m", "functions.cli", *args],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextlib.contextmanager
def embedding_worker_process(logs: Path, *options: str, timeout_s: float = 120) -> Iterator[str]:
    """A real `fleetchat embedding-worker` on a free port (with `options`, e.g. `--rerank POOL`), healthy; its URL.
    Stopped on exit."""
    group = ProcessGroup(logs)
    port = free_port()
    proc = group.spawn("embedding-worker", ["embedding-worker", "--port", str(port), "--quiet", *options])
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http_ok(f"{url}/health", proc, group.logs / "embedding-worker.log", timeout_s=timeout_s)
        yield url
    finally:
        group.stop()


@dataclass
class StartingWorker:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def wait(self) -> str:
        wait_http_ok(f"{self.url}/health", self.proc, self.log)
        return self.url


def start_worker(group: ProcessGroup, pool: str, port: int, kv_cache_tokens: int = 16_384) -> StartingWorker:
    """Spawn a real worker (it loads SmolLM2); call `.wait()` once all are spawned so they load in parallel."""
    name = f"worker-{pool}-{port}"
    args = ["worker", "--pool", pool, "--port", str(port), "--kv-cache-tokens", str(kv_cache_tokens), "--quiet"]
    proc = group.spawn(name, args)
    return StartingWorker(f"http://127.0.0.1:{port}", proc, group.logs / f"{name}.log")


def start_gateway(
    group: ProcessGroup,
    data_dir: Path,
    worker_urls: dict[str, list[str]],
    port: int,
    extra_env: dict[str, str] | None = None,
) -> str:
    env = {
        "FLEETCHAT_WORKER_URLS": json.dumps(worker_urls),
        "FLEETCHAT_POOLS": json.dumps(list(worker_urls)),
        **(extra_env or {}),
    }
    proc = group.spawn(f"gateway-{port}", ["gateway", "--port", str(port), "--data-dir", str(data_dir)], env=env)
    url = f"http://127.0.0.1:{port}"
    wait_http_ok(f"{url}/metrics", proc, group.logs / f"gateway-{port}.log", timeout_s=60)
    return url

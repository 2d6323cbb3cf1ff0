"""Resident memory of a real worker process (`fleetchat worker`) per engine, after it served a burst of requests."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

from functions.offline.bench.prompts import generation_messages, long_system_prompt, prefix_messages
from functions.offline.bench.stack import wait_healthy
from gpu_workers.server.parent_death import SUPERVISOR_PID_ENV

START_TIMEOUT_S = 300.0


def worker_rss_mb(pool: str, engine: str, *, streams: int = 8, max_tokens: int = 32) -> dict[str, float]:
    """Start a worker with `engine`, send `streams` concurrent requests and one ~1,000-token prompt, then read its
    resident set (now and peak, in MiB). The worker is stopped afterwards."""
    with running_worker(pool, ["--engine", engine]) as (proc, url):
        return _serve_burst(proc, url, pool, streams, max_tokens)


@contextlib.contextmanager
def running_worker(pool: str, options: list[str]) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A real `fleetchat worker` of `pool` with `options` on a free loopback port, healthy; stopped afterwards."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "functions.cli",
        "worker",
        "--pool",
        pool,
        "--port",
        str(port),
        *options,
    ]
    env = {**os.environ, SUPERVISOR_PID_ENV: str(os.getpid())}  # dies with the bench, even on SIGKILL
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([*command, "--quiet"], stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_healthy(url, START_TIMEOUT_S, proc, path="/health")
            yield proc, url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def _serve_burst(proc: subprocess.Popen[bytes], url: str, pool: str, streams: int, max_tokens: int) -> dict[str, float]:
    bodies = [{"model": pool, "messages": generation_messages(i), "max_tokens": max_tokens} for i in range(streams)]
    bodies.append({"model": pool, "messages": prefix_messages(long_system_prompt("rss"), 0), "max_tokens": 8})
    with httpx.Client(timeout=600) as http, concurrent.futures.ThreadPoolExecutor(len(bodies)) as threads:
        for response in threads.map(lambda b: http.post(f"{url}/v1/chat/completions", json=b), bodies):
            response.raise_for_status()
    return {"rss_mb": psutil.Process(proc.pid).memory_info().rss / 2**20, "peak_mb": _peak_mb(proc.pid)}


def _peak_mb(pid: int) -> float:
    """VmHWM (Linux's high-water mark of the resident set); the current RSS elsewhere."""
    status = Path(f"/proc/{pid}/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return psutil.Process(pid).memory_info().rss / 2**20

"""Debian's redis-server as a child process on a free loopback port, persistence off, in a given directory: the shared
control state's deployed engine where a benchmark or a test needs a real one."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class RedisServer:
    url: str
    process: subprocess.Popen[bytes]  # for a fault injection's SIGSTOP / SIGCONT


@contextmanager
def redis_process(binary: str, directory: Path, *, start_timeout_s: float = 10.0) -> Iterator[str]:
    """Start `binary` (redis-server) and yield its URL once it accepts connections; stopped on exit."""
    with redis_server_process(binary, directory, start_timeout_s=start_timeout_s) as server:
        yield server.url


@contextmanager
def redis_server_process(binary: str, directory: Path, *, start_timeout_s: float = 10.0) -> Iterator[RedisServer]:
    """Start `binary` (redis-server) and yield it once it accepts connections; stopped on exit (resumed first, should
    it have been left paused)."""
    port = _free_port()
    args = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(directory),
    ]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield RedisServer(f"redis://127.0.0.1:{port}/0", process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
        process.terminate()
        process.wait(timeout=10)

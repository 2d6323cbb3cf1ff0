"""Debian's redis-server on a loopback port, in a temporary directory, with persistence off: the deployed control
state's engine, tested as a real server (never an in-process fake)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.processes import free_port

REDIS_BINARY = "redis-server"


def require_redis() -> str:
    """The redis-server binary; skips the test where it is not installed, fails where CI requires it."""
    found = shutil.which(REDIS_BINARY)
    if found is None:
        if os.environ.get("FLEETCHAT_REQUIRE_REDIS") == "1":
            pytest.fail("redis-server is required (FLEETCHAT_REQUIRE_REDIS=1) but not installed")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    return found


@contextmanager
def redis_server(directory: Path) -> Iterator[str]:
    """Start redis-server on a free port; yields its URL. Stopped (and its files removed with `directory`) after."""
    binary = require_redis()
    port = free_port()
    process = subprocess.Popen(
        [
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
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(timeout=10)

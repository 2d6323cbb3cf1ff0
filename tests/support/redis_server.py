"""Debian's redis-server on a loopback port, in a temporary directory, with persistence off: the deployed control
state's engine, tested as a real server (never an in-process fake)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from functions.offline.measure.redis_process import redis_process

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
    with redis_process(require_redis(), directory) as url:
        yield url

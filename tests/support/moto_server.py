"""moto in server mode on a loopback port: the AWS adapter is tested over real HTTP, never with in-process patches."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from moto.server import ThreadedMotoServer

from tests.support.processes import free_port

DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextmanager
def moto_server() -> Iterator[str]:
    """Start moto on a free port; yields its endpoint URL."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def unique_names() -> tuple[str, str]:
    """A fresh (table, bucket) pair so tests sharing one moto server never see each other's data."""
    suffix = uuid.uuid4().hex[:12]
    return f"fleetchat-test-{suffix}", f"fleetchat-test-{suffix}"

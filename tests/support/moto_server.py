"""moto in server mode on a loopback port: the AWS adapter is tested over real HTTP, never with in-process patches."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from tests.support.processes import free_port

DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextmanager
def moto_server() -> Iterator[str]:
    """Start moto on a free port; yields its endpoint URL.

    DynamoDB applies each request atomically; moto, serving each in its own thread, does not: two conditional updates
    can both pass their condition, and a cancelled transaction restores a copy of the whole table taken when it began,
    undoing what other threads wrote meanwhile. One lock around each request gives moto DynamoDB's atomicity; clients
    still race each other over real HTTP, which is what the concurrency tests are about.
    """
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()

    def atomic(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with lock:
            return app(environ, start_response)

    server = make_server("127.0.0.1", free_port(), atomic, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join()


def unique_names() -> tuple[str, str]:
    """A fresh (table, bucket) pair so tests sharing one moto server never see each other's data."""
    suffix = uuid.uuid4().hex[:12]
    return f"fleetchat-test-{suffix}", f"fleetchat-test-{suffix}"

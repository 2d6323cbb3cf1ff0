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


def new_pk_sk_table(endpoint: str) -> tuple[Any, str, str]:
    """A fresh DynamoDB table keyed (pk, sk) and a fresh S3 bucket on the moto server at `endpoint`: (a DynamoDB client
    on plain Python values, the table's name, the bucket's name), as the conversations table's stores take them."""
    import boto3
    from botocore.config import Config

    table, bucket = unique_names()
    # Patient timeouts: moto's first request loads its DynamoDB backend, slow on busy shared cores.
    ddb = boto3.resource(
        "dynamodb", endpoint_url=endpoint, region_name="us-east-1", config=Config(read_timeout=120)
    ).meta.client
    ddb.create_table(
        TableName=table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk")],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    )
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return ddb, table, bucket

"""Benchmark phase: append-a-turn latency of the conversation stores (SQLite file; DynamoDB + S3 on moto over HTTP)."""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.progress import Progress

from functions.offline.bench.results.records import StoreAppendStats
from functions.offline.measure import stats
from shared.storage.conversations import ConversationStore, StoredMessage, new_conversation_id
from shared.storage.timestamps import utc_now

TURN_TEXT = "How long should I simmer the lentils, and do I salt them at the start or the end? " * 4
ANSWER_TEXT = "Simmer them for about twenty minutes and salt near the end so the skins stay tender. " * 6


def _turn() -> list[StoredMessage]:
    now = utc_now()
    return [
        StoredMessage(role="user", content=TURN_TEXT, created_at=now),
        StoredMessage(role="assistant", content=ANSWER_TEXT, created_at=now),
    ]


def measure_appends(name: str, store: ConversationStore, appends: int, progress: Progress) -> StoreAppendStats:
    """Append `appends` turns across conversations of 10 turns each, timing every append_turn call."""
    task = progress.add_task(f"append a turn: {name}", total=appends)
    timings: list[float] = []
    conversation_id, version = new_conversation_id(), 0
    for _ in range(appends):
        if version == 10:
            conversation_id, version = new_conversation_id(), 0
        start = time.perf_counter()
        meta = store.append_turn(
            "ten_bench", conversation_id, expected_version=version, messages=_turn(), expires_at=None, render_version=1
        )
        timings.append(time.perf_counter() - start)
        version = meta.version
        progress.advance(task)
    return StoreAppendStats(
        store=name,
        appends=appends,
        p50_ms=stats.to_ms(stats.percentile(timings, 50)),
        p99_ms=stats.to_ms(stats.percentile(timings, 99)),
        max_ms=stats.to_ms(max(timings)),
    )


# moto accepts any credentials, but boto3 refuses to sign without some.
MOTO_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}


@contextmanager
def _moto_store() -> Iterator[ConversationStore]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log would flood the progress display
    from shared.storage.aws.conversations import AwsConversationStore, AwsStoreConfig, ensure_resources

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    saved = {name: os.environ.get(name) for name in MOTO_CREDENTIALS}
    os.environ.update(MOTO_CREDENTIALS)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        config = AwsStoreConfig(table_name="fleetchat-bench", bucket="fleetchat-bench", endpoint_url=endpoint)
        ensure_resources(config)
        store = AwsConversationStore(config)
        try:
            yield store
        finally:
            store.close()
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def store_append_phase(appends: int, progress: Progress) -> tuple[list[StoreAppendStats], list[str]]:
    """Both adapters, same workload; returns the stats and notes (e.g. moto not installed)."""
    from shared.storage.sqlite.conversations import SQLiteConversationStore

    results, notes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = SQLiteConversationStore(Path(tmp) / "bench.db")
        try:
            results.append(measure_appends("sqlite (WAL, synchronous=FULL)", sqlite, appends, progress))
        finally:
            sqlite.close()
    try:
        import moto.server  # noqa: F401 - only to know whether the test extra is installed
    except ImportError:
        notes.append("moto is not installed (make install: the test extra is in the lock): no AWS adapter numbers.")
        return results, notes
    with _moto_store() as store:
        results.append(measure_appends("dynamodb + s3 (moto server, loopback HTTP)", store, appends, progress))
    notes.append(
        "The AWS numbers are moto on loopback: they measure the adapter's request count and serialization, "
        "not DynamoDB/S3 service latency."
    )
    return results, notes

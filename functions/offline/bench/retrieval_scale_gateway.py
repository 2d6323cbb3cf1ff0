"""The scale bench's gateway phase: the million-chunk store (functions/offline/bench/retrieval_scale.py) searched
through a real gateway over HTTP, `POST /v1/vector_stores/{id}/search` (auth, the question embedded by the real MiniLM
embedding worker, the files service's checks, chat's hybrid ranking), with the gateway's resident memory.

The store was written by the in-process phase under a bench tenant; this phase makes a real tenant and key, names the
store's 1,000 files as completed attachments of a vector store, and (for its run only) renames the store's table to
the tenant's. The vectors are the bench's averaged word embeddings while the question is embedded by MiniLM itself,
so the ranking means nothing here: only the latency and memory are measured."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np

from shared.storage.lance_vector_index import table_name

MODEL = "text-embedding-minilm"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise RuntimeError(f"{url} never answered")


@contextlib.contextmanager
def _embedding_worker() -> Iterator[str]:
    port = _port()
    command = [sys.executable, "-m", "functions.cli", "embedding-worker", "--port", str(port), "--quiet"]
    with subprocess.Popen(command) as worker:
        try:
            _wait(f"http://127.0.0.1:{port}/health", 180)
            yield f"http://127.0.0.1:{port}"
        finally:
            worker.terminate()


def _registered(work_dir: Path, store_id: str, files: int, per_file: int) -> tuple[str, str]:
    """(tenant id, API key): a tenant owning the vector store and its files, as completed attachments."""
    from shared.api_keys import hash_api_key, new_api_key
    from shared.fleet.tiers import Tier
    from shared.storage.files import Attachment, FileQuota, StoredFile, StoredVectorStore
    from shared.storage.sqlite.accounts import SQLiteStore
    from shared.storage.sqlite.files import SQLiteFileStore

    accounts = SQLiteStore(work_dir / "fleetchat.db")
    tenant = accounts.create_tenant("scale", Tier.ENTERPRISE)
    key = new_api_key()
    accounts.add_api_key(tenant.id, hash_api_key(key), "scale")
    store, now = SQLiteFileStore(work_dir / "fleetchat.db"), datetime.now(UTC)
    store.create_vector_store(
        StoredVectorStore(id=store_id, tenant_id=tenant.id, name="scale", created_at=now, last_active_at=now,
                          embedding_model=MODEL)
    )  # fmt: skip
    quota = FileQuota(max_files=10 * files, max_total_bytes=2**40)
    for n in range(files):
        file_id = f"file-{n:06d}"
        store.add_file(
            StoredFile(id=file_id, tenant_id=tenant.id, filename=f"{file_id}.txt", purpose="assistants",
                       bytes=per_file * 700, kind="text", sha256="0" * 64, created_at=now), quota,
        )  # fmt: skip
        store.attach(Attachment(tenant_id=tenant.id, vector_store_id=store_id, file_id=file_id, created_at=now,
                                status="completed", chunks=per_file))  # fmt: skip
    return tenant.id, key


def _gateway_searches(
    work_dir: str, bench_tenant: str, store_id: str, questions: list[str], files: int, per_file: int
) -> tuple[float, float, float]:
    import psutil
    import uvicorn

    from functions.app import create_app
    from shared.settings import Settings

    root = Path(work_dir)
    for name in ("fleetchat.db", "fleetchat.db-wal", "fleetchat.db-shm"):  # this phase's own accounts, made anew
        (root / name).unlink(missing_ok=True)
    tenant_id, key = _registered(root, store_id, files, per_file)
    bench_table = root / "vectors" / f"{table_name(bench_tenant, store_id)}.lance"
    gateway_table = root / "vectors" / f"{table_name(tenant_id, store_id)}.lance"
    bench_table.rename(gateway_table)
    try:
        with _embedding_worker() as embedder:
            settings = Settings(data_dir=root, embedding_worker_urls={MODEL: [embedder]}, worker_urls={})
            port = _port()
            server = uvicorn.Server(uvicorn.Config(create_app(settings), port=port, log_level="warning"))
            thread = threading.Thread(target=server.run, daemon=True)
            thread.start()
            _wait(f"http://127.0.0.1:{port}/health", 120)
            seconds = []
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"authorization": f"Bearer {key}"}) as c:
                for n, question in enumerate(questions):
                    started = time.perf_counter()
                    found = c.post(f"/v1/vector_stores/{store_id}/search", json={"query": question}, timeout=60)
                    if found.status_code != 200:  # an HTTPStatusError does not cross back from the pool
                        raise RuntimeError(f"search answered {found.status_code}: {found.text[:500]}")
                    if n:  # the first opens the store
                        seconds.append(time.perf_counter() - started)
            rss = psutil.Process(os.getpid()).memory_info().rss / 2**20
            server.should_exit = True
            thread.join(timeout=30)
    finally:
        gateway_table.rename(bench_table)
    ms = np.asarray(seconds) * 1000
    return round(float(np.median(ms)), 2), round(float(np.percentile(ms, 95)), 2), round(rss, 1)


def gateway_phase(
    work_dir: Path, bench_tenant: str, store_id: str, questions: list[str], files: int, per_file: int
) -> tuple[float, float, float]:
    """(p50 ms, p95 ms, the gateway process's resident MB) of the search endpoint, in a fresh process."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_gateway_searches, (str(work_dir), bench_tenant, store_id, questions, files, per_file))

"""Crash safety of ingestion with a real gateway process (`fleetchat gateway`) killed with SIGKILL mid-ingestion:
nothing of the file is indexed (a file's chunks are written all at once), the file stays `in_progress`, and the next
gateway on the same data dir resumes it to `completed` with every chunk exactly once. Two gateways resuming the
same file at once: one holds its ingestion lease and does the work, the other leaves it alone (every chunk embedded
once, not twice)."""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai

from shared.api_keys import hash_api_key, new_api_key
from shared.fleet.tiers import Tier
from shared.storage.lance_vector_index import LanceVectorIndex
from shared.storage.sqlite.accounts import SQLiteStore
from shared.storage.sqlite.files import SQLiteFileStore
from tests.support.processes import ProcessGroup, free_port, start_gateway
from tests.support.servers import serve
from tests.support.stand_ins.embedding_stand_in import EmbeddingStandIn
from tests.support.stand_ins.stand_in import stand_in_worker

MODEL = "text-embedding-minilm"
LEASE_S = "2"  # the killed gateway's lease lapses quickly (the default is 30 s)


def _document(sections: int = 40, paragraphs: int = 8) -> bytes:
    """Enough text for several embedding batches (64 chunks each)."""
    parts = []
    for s in range(sections):
        parts.append(f"## Section {s}")
        parts += [" ".join(f"topic{s} detail{p} word{w}" for w in range(30)) for p in range(paragraphs)]
    return "\n\n".join(parts).encode()


def _wait(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise TimeoutError(what)


def _owner(data: Path) -> tuple[str, str]:
    """A Plus tenant in a fresh data dir's store: its id and an API key."""
    tenants = SQLiteStore(data / "fleetchat.db")
    tenant = tenants.create_tenant("owner", Tier.PLUS)
    key = new_api_key()
    tenants.add_api_key(tenant.id, hash_api_key(key), "owner")
    tenants.close()
    return tenant.id, key


def test_a_gateway_killed_mid_ingestion_leaves_nothing_half_indexed_and_the_next_one_resumes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    tenant_id, key = _owner(data)
    embedder = EmbeddingStandIn(delay_s=1.0)  # a batch a second: the kill lands between batches
    group = ProcessGroup(tmp_path / "logs")
    with serve(stand_in_worker("ok")) as chat, serve(embedder.app()) as embeddings:
        env = {"FLEETCHAT_EMBEDDING_WORKER_URLS": json.dumps({MODEL: [embeddings]}),
               "FLEETCHAT_FILES_INGESTION_LEASE_S": LEASE_S}  # fmt: skip
        try:
            url = start_gateway(group, data, {"mini": [chat]}, free_port(), extra_env=env)
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
            file = client.files.create(file=("manual.md", _document()), purpose="assistants")
            store = client.vector_stores.create(name="manual", file_ids=[file.id])
            _wait(lambda: embedder.calls >= 2, 120, "ingestion never reached its second batch")
            group.procs[-1].send_signal(signal.SIGKILL)
            group.procs[-1].wait(timeout=30)
            embedded_before_kill = embedder.calls

            index, files = LanceVectorIndex(str(data / "vectors")), SQLiteFileStore(data / "fleetchat.db")
            try:
                assert index.count(tenant_id, store.id, file.id) == 0  # none of it: not half
                assert files.get_attachment(tenant_id, store.id, file.id).status == "in_progress"

                embedder.delay_s = 0.0
                url = start_gateway(group, data, {"mini": [chat]}, free_port(), extra_env=env)
                client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
                _wait(
                    lambda: (
                        client.vector_stores.files.retrieve(file.id, vector_store_id=store.id).status != "in_progress"
                    ),
                    120,
                    "the restarted gateway did not finish the ingestion",
                )
                attached = client.vector_stores.files.retrieve(file.id, vector_store_id=store.id)
                assert attached.status == "completed" and attached.last_error is None
                chunks = list(index.chunks(tenant_id, store.id))
                stored = files.get_attachment(tenant_id, store.id, file.id)
                assert len(chunks) == stored.chunks > 64 * 2
                assert [c.seq for c in chunks] == list(range(len(chunks)))  # every chunk exactly once
                assert embedder.calls > embedded_before_kill  # resumed, not left behind
                hit = client.vector_stores.search(store.id, query="topic17 detail3").data[0]
                assert "topic17 detail3" in hit.content[0].text
            finally:
                index.close()
                files.close()
        finally:
            group.stop()


def test_two_gateways_resuming_the_same_file_at_once_ingest_it_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    tenant_id, key = _owner(data)
    embedder = EmbeddingStandIn(delay_s=1.0)
    group = ProcessGroup(tmp_path / "logs")
    with serve(stand_in_worker("ok")) as chat, serve(embedder.app()) as embeddings:
        env = {"FLEETCHAT_EMBEDDING_WORKER_URLS": json.dumps({MODEL: [embeddings]}),
               "FLEETCHAT_FILES_INGESTION_LEASE_S": LEASE_S}  # fmt: skip
        try:
            url = start_gateway(group, data, {"mini": [chat]}, free_port(), extra_env=env)
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
            file = client.files.create(file=("manual.md", _document()), purpose="assistants")
            store = client.vector_stores.create(name="manual", file_ids=[file.id])
            _wait(lambda: embedder.calls >= 1, 120, "ingestion never started")
            group.procs[-1].send_signal(signal.SIGKILL)
            group.procs[-1].wait(timeout=30)
            time.sleep(float(LEASE_S) + 0.5)  # the dead gateway's lease has lapsed: both newcomers may take it
            embedded_before = len(embedder.inputs)
            embedder.delay_s = 0.3  # slow enough that both gateways are up while the file ingests

            with ThreadPoolExecutor(2) as pool:  # two replicas starting together, each resuming what it finds
                urls = list(pool.map(lambda _: start_gateway(group, data, {"mini": [chat]}, free_port(), env), [0, 1]))
            clients = [openai.OpenAI(base_url=f"{u}/v1", api_key=key, max_retries=0) for u in urls]
            _wait(
                lambda: (
                    clients[0].vector_stores.files.retrieve(file.id, vector_store_id=store.id).status != "in_progress"
                ),
                120,
                "neither gateway finished the ingestion",
            )
            index, files = LanceVectorIndex(str(data / "vectors")), SQLiteFileStore(data / "fleetchat.db")
            try:
                stored = files.get_attachment(tenant_id, store.id, file.id)
                assert stored.status == "completed" and stored.chunks > 64 * 2
                assert [c.seq for c in index.chunks(tenant_id, store.id)] == list(range(stored.chunks))
            finally:
                index.close()
                files.close()
            time.sleep(float(LEASE_S) * 2)  # any second ingestion would have started by now
            # Every chunk was embedded once after the restart: one gateway did the work, the other left it alone.
            assert len(embedder.inputs) - embedded_before == stored.chunks
            assert all(c.vector_stores.files.retrieve(file.id, vector_store_id=store.id).status == "completed"
                       for c in clients)  # fmt: skip
        finally:
            group.stop()

"""`/v1/files` and `/v1/vector_stores` end to end: the real openai SDK -> the real gateway (uvicorn, SQLite, its data
dir) -> a stand-in embedding worker over loopback (hashed bags of words: the model is not the point here; the real
MiniLM path is the embeddings API's own test). Documents are real PDF, DOCX, HTML and Markdown files."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from shared.api_keys import hash_api_key
from shared.fleet.tiers import LimitOverrides
from shared.storage.accounts import TenantChanges
from shared.storage.lance_vector_index import LanceVectorIndex
from shared.storage.sqlite.accounts import SQLiteStore
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.documents import docx_with, malformed_pdf, pdf_with_pages
from tests.support.processes import free_port
from tests.support.rate_windows import early_in_a_window
from tests.support.servers import serve
from tests.support.stand_ins.embedding_stand_in import EmbeddingStandIn
from tests.support.stand_ins.stand_in import stand_in_worker

MODEL = "text-embedding-minilm"
GUIDE = """# Fleet guide

The fleet serves chat models on many machines.

## Opening hours

The support desk opens at nine and closes at five, Monday to Friday.

## Billing

Invoices are sent on the first day of every month by email.
"""


@pytest.fixture
def embedder() -> EmbeddingStandIn:
    return EmbeddingStandIn()


@pytest.fixture
def gateway(gateway_for: GatewayFactory, embedder: EmbeddingStandIn) -> Iterator[Gateway]:
    with serve(stand_in_worker("ok")) as chat, serve(embedder.app()) as embeddings:
        yield gateway_for({"mini": [chat]}, embedding_worker_urls={MODEL: [embeddings]})


def _client(gateway: Gateway, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key or gateway.key, max_retries=0)


def _settle(client: openai.OpenAI, store_id: str, timeout_s: float = 120) -> list:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        files = client.vector_stores.files.list(store_id).data
        if files and all(f.status != "in_progress" for f in files):
            return files
        time.sleep(0.2)
    raise TimeoutError("ingestion did not finish")


def _tenant_id(gateway: Gateway, key: str) -> str:
    store = SQLiteStore(gateway.data_dir / "fleetchat.db")
    try:
        return store.find_key_with_tenant(hash_api_key(key))[1].id
    finally:
        store.close()


def test_the_sdk_uploads_lists_downloads_and_deletes_a_file(gateway: Gateway) -> None:
    client = _client(gateway)
    created = client.files.create(file=("guide.md", GUIDE.encode()), purpose="assistants")
    assert created.id.startswith("file-") and created.bytes == len(GUIDE.encode())
    assert (created.filename, created.purpose, created.object) == ("guide.md", "assistants", "file")
    assert client.files.retrieve(created.id).bytes == created.bytes
    assert [f.id for f in client.files.list().data] == [created.id]
    assert client.files.content(created.id).content == GUIDE.encode()
    assert client.files.delete(created.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(created.id)
    tenant = _tenant_id(gateway, gateway.key)
    assert not (gateway.data_dir / "files" / tenant / created.id).exists()  # the body is gone too


def test_a_vector_store_indexes_every_kind_and_search_finds_the_passage(gateway: Gateway) -> None:
    client = _client(gateway)
    documents = {
        "guide.md": GUIDE.encode(),
        "policy.pdf": pdf_with_pages([["Refund policy", "Refunds are paid within fourteen days."]]),
        "setup.docx": docx_with("Setup", ["Install the agent with make install."]),
        "faq.html": b"<html><body><h1>FAQ</h1><p>Passwords are reset from the account page.</p></body></html>",
    }
    ids = [client.files.create(file=(name, body), purpose="assistants").id for name, body in documents.items()]
    store = client.vector_stores.create(name="handbook", file_ids=ids[:2])
    assert store.object == "vector_store" and store.name == "handbook" and store.file_counts.total == 2
    for file_id in ids[2:]:
        attached = client.vector_stores.files.create(vector_store_id=store.id, file_id=file_id)
        assert attached.vector_store_id == store.id and attached.status in ("in_progress", "completed")
    files = _settle(client, store.id)
    assert sorted(f.id for f in files) == sorted(ids) and {f.status for f in files} == {"completed"}
    store = client.vector_stores.retrieve(store.id)
    assert store.status == "completed" and store.file_counts.completed == 4 and store.usage_bytes > 0

    for query, filename, phrase in [
        ("when does the support desk open", "guide.md", "opens at nine"),
        ("refunds paid fourteen days", "policy.pdf", "fourteen days"),
        ("install the agent", "setup.docx", "make install"),
        ("reset passwords account page", "faq.html", "account page"),
    ]:
        results = client.vector_stores.search(store.id, query=query, max_num_results=3).data
        assert results[0].filename == filename and phrase in results[0].content[0].text, (query, results)
        extra = results[0].model_extra or {}
        assert extra["chunk_id"].startswith(results[0].file_id) and extra["end_offset"] > extra["start_offset"]

    guide = next(r for r in client.vector_stores.search(store.id, query="opening hours support desk").data)
    extra = guide.model_extra or {}
    assert GUIDE[extra["start_offset"] : extra["end_offset"]] == guide.content[0].text  # offsets open the passage


def test_a_malformed_pdf_fails_that_file_only_with_a_clear_last_error(gateway: Gateway) -> None:
    client = _client(gateway)
    good = client.files.create(file=("guide.md", GUIDE.encode()), purpose="assistants")
    bad = client.files.create(file=("broken.pdf", malformed_pdf()), purpose="assistants")
    store = client.vector_stores.create(name="mixed", file_ids=[bad.id, good.id])
    files = {f.id: f for f in _settle(client, store.id)}
    assert files[good.id].status == "completed" and files[bad.id].status == "failed"
    assert (
        files[bad.id].last_error.code == "invalid_file" and "PDF could not be read" in files[bad.id].last_error.message
    )
    counts = client.vector_stores.retrieve(store.id).file_counts
    assert (counts.completed, counts.failed, counts.total) == (1, 1, 2)
    assert client.vector_stores.search(store.id, query="billing invoices").data[0].file_id == good.id
    failed = client.vector_stores.files.list(store.id, filter="failed").data
    assert [f.id for f in failed] == [bad.id]


def test_another_tenants_file_and_vector_store_are_404(gateway: Gateway) -> None:
    owner, other = _client(gateway), _client(gateway, gateway.other_key)
    file = owner.files.create(file=("guide.md", GUIDE.encode()), purpose="assistants")
    store = owner.vector_stores.create(name="mine", file_ids=[file.id])
    _settle(owner, store.id)
    mine = other.vector_stores.create(name="theirs")
    for call in (
        lambda: other.files.retrieve(file.id),
        lambda: other.files.content(file.id),
        lambda: other.files.delete(file.id),
        lambda: other.vector_stores.retrieve(store.id),
        lambda: other.vector_stores.delete(store.id),
        lambda: other.vector_stores.files.list(store.id),
        lambda: other.vector_stores.search(store.id, query="opening hours"),
        lambda: other.vector_stores.files.create(vector_store_id=mine.id, file_id=file.id),
        lambda: other.vector_stores.create(name="x", file_ids=[file.id]),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert other.files.list().data == [] and [s.id for s in other.vector_stores.list().data] == [mine.id]
    assert owner.files.retrieve(file.id).id == file.id  # untouched by the attempts


def _limit(gateway: Gateway, overrides: LimitOverrides) -> None:
    store = SQLiteStore(gateway.data_dir / "fleetchat.db")
    try:
        store.update_tenant(_tenant_id(gateway, gateway.key), TenantChanges(limits=overrides))
    finally:
        store.close()


def test_over_the_size_limit_is_413_and_a_wrong_type_is_400_and_nothing_is_kept(gateway: Gateway) -> None:
    _limit(gateway, LimitOverrides(max_file_bytes=2000))
    client = _client(gateway)
    with pytest.raises(openai.APIStatusError) as caught:
        client.files.create(file=("big.md", b"word " * 500), purpose="assistants")
    assert caught.value.status_code == 413 and caught.value.code == "file_too_large"
    with pytest.raises(openai.BadRequestError) as caught:
        client.files.create(file=("report.pdf", b"plain text, not a PDF"), purpose="assistants")
    assert caught.value.code == "invalid_file"
    with pytest.raises(openai.BadRequestError):
        client.files.create(file=("notes.md", b"fine"), purpose="fine-tune")
    assert client.files.list().data == []
    assert not any((gateway.data_dir / "files").rglob("file-*"))


def test_the_file_quota_refuses_with_429_and_keeps_nothing_more(gateway: Gateway) -> None:
    _limit(gateway, LimitOverrides(max_files=2))
    client = _client(gateway)
    for i in range(2):
        client.files.create(file=(f"n{i}.txt", b"note"), purpose="user_data")
    with pytest.raises(openai.RateLimitError) as caught:
        client.files.create(file=("n2.txt", b"note"), purpose="user_data")
    assert caught.value.code == "file_quota_exceeded"
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert len(client.files.list().data) == 2
    assert sum(1 for _ in (gateway.data_dir / "files").rglob("file-*")) == 2


def test_detaching_and_deleting_take_the_vectors_with_them(gateway: Gateway) -> None:
    client = _client(gateway)
    file = client.files.create(file=("guide.md", GUIDE.encode()), purpose="assistants")
    store = client.vector_stores.create(name="s", file_ids=[file.id])
    _settle(client, store.id)
    tenant = _tenant_id(gateway, gateway.key)
    index = LanceVectorIndex(str(gateway.data_dir / "vectors"))
    try:
        assert index.count(tenant, store.id, file.id) > 0
        assert client.vector_stores.files.delete(file_id=file.id, vector_store_id=store.id).deleted
        assert index.count(tenant, store.id) == 0 and client.vector_stores.search(store.id, query="billing").data == []
        second = client.vector_stores.create(name="t", file_ids=[file.id])
        _settle(client, second.id)
        client.files.delete(file.id)
        assert index.count(tenant, second.id) == 0
        assert client.vector_stores.files.list(second.id).data == []
        assert client.vector_stores.delete(second.id).deleted
    finally:
        index.close()


def test_search_input_is_checked(gateway: Gateway) -> None:
    client = _client(gateway)
    store = client.vector_stores.create(name="empty")
    url = f"{gateway.url}/v1/vector_stores/{store.id}/search"
    for body in ({"query": "   "}, {"query": "x", "max_num_results": 51}, {"query": 7}, {}):
        response = httpx.post(url, json=body, headers=gateway.headers())
        assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error", body
    assert client.vector_stores.search(store.id, query="anything").data == []


def test_fields_openai_does_not_define_or_the_service_cannot_honour_are_400s_naming_them(gateway: Gateway) -> None:
    client = _client(gateway)
    store = client.vector_stores.create(name="strict", chunking_strategy={"type": "auto"})  # auto is the default
    base = f"{gateway.url}/v1/vector_stores"
    refused = [
        (base, {"name": "x", "colour": "red"}, "colour", "Unrecognized request argument supplied: colour"),
        (base, {"name": "x", "chunking_strategy": {"type": "static", "static": {"max_chunk_size_tokens": 400}}},
         "chunking_strategy", "only 'auto' is supported"),
        (base, {"name": "x", "description": "notes"}, None, "'description' is not kept here"),
        (f"{base}/{store.id}/files", {"file_id": "file-x", "priority": 1}, "priority", "Unrecognized"),
        (f"{base}/{store.id}/search", {"query": "x", "rerank": True}, "rerank", "Unrecognized"),
    ]  # fmt: skip
    for url, body, param, message in refused:
        response = httpx.post(url, json=body, headers=gateway.headers())
        assert response.status_code == 400, body
        error = response.json()["error"]
        assert message in error["message"], error
        if param is not None:
            assert error["param"] == param
    assert [s.name for s in client.vector_stores.list().data].count("x") == 0  # nothing was created


def test_multipart_without_a_file_is_a_400(gateway: Gateway, tmp_path: Path) -> None:
    response = httpx.post(f"{gateway.url}/v1/files", data={"purpose": "assistants"}, headers=gateway.headers())
    assert response.status_code == 400 and response.json()["error"]["param"] in ("file", "body.file", None)


def test_search_is_rate_limited_like_any_embedding(gateway: Gateway) -> None:
    client = _client(gateway)
    store = client.vector_stores.create(name="s")
    _limit(gateway, LimitOverrides(key_rpm=1, tenant_rpm=1))
    early_in_a_window()
    client.vector_stores.search(store.id, query="first")
    with pytest.raises(openai.RateLimitError) as caught:
        client.vector_stores.search(store.id, query="second")
    assert int(caught.value.response.headers["retry-after"]) <= 60


def test_search_with_a_broken_embedding_worker_is_a_502(gateway: Gateway, embedder: EmbeddingStandIn) -> None:
    client = _client(gateway)
    store = client.vector_stores.create(name="s")
    embedder.broken = True
    with pytest.raises(openai.APIStatusError) as caught:
        client.vector_stores.search(store.id, query="anything")
    assert caught.value.status_code == 502


def test_search_without_an_embedding_worker_is_a_503(gateway_for: GatewayFactory) -> None:
    with serve(stand_in_worker("ok")) as chat:
        down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        gateway = gateway_for({"mini": [chat]}, embedding_worker_urls={MODEL: [down]})
        client = _client(gateway)
        store = client.vector_stores.create(name="s")
        with pytest.raises(openai.APIStatusError) as caught:
            client.vector_stores.search(store.id, query="anything")
        assert caught.value.status_code == 503 and "retry-after" in caught.value.response.headers

"""`GET /v1/vector_stores/{id}/files/{file_id}/content` end to end: the real openai SDK (`vector_stores.files.content`)
-> the real gateway on both storages (embedded: SQLite; deployed: DynamoDB and S3 on moto's server over HTTP) -> a
stand-in embedding worker over loopback. Each part is one indexed chunk in
reading order, its text the file's text at its offsets (what the web chat shows for a stored citation); another
tenant's store and a file not attached to the store are 404s."""

from __future__ import annotations

import time
from collections.abc import Iterator

import openai
import pytest

from functions.offline.evals.rag.items import load_documents
from shared.storage.aws.conversations import AwsStoreConfig, ensure_resources
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.moto_server import DUMMY_CREDENTIALS, moto_server, unique_names
from tests.support.servers import serve
from tests.support.stand_ins.embedding_stand_in import EmbeddingStandIn
from tests.support.stand_ins.stand_in import stand_in_worker

MODEL = "text-embedding-minilm"


@pytest.fixture(params=["embedded", "deployed"])
def gateway(
    request: pytest.FixtureRequest, gateway_for: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Gateway]:
    with serve(stand_in_worker("ok")) as chat, serve(EmbeddingStandIn().app()) as embeddings:
        workers = {"worker_urls": {"mini": [chat]}, "embedding_worker_urls": {MODEL: [embeddings]}}
        if request.param == "embedded":
            yield gateway_for(**workers)
            return
        for name, value in DUMMY_CREDENTIALS.items():
            monkeypatch.setenv(name, value)
        with moto_server() as endpoint:
            table, bucket = unique_names()
            ensure_resources(AwsStoreConfig(table_name=table, bucket=bucket, endpoint_url=endpoint))
            yield gateway_for(
                **workers,
                conversation_store="aws",
                conversations_table=table,
                conversations_bucket=bucket,
                aws_endpoint_url=endpoint,
            )


def _client(gateway: Gateway, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key or gateway.key, max_retries=0)


def test_the_content_is_the_files_chunks_in_order_at_their_offsets(gateway: Gateway) -> None:
    client = _client(gateway)
    document = next(d for d in load_documents() if d.title == "Normans")  # a public SQuAD article, several chunks
    text = "\n\n".join(document.text.split("\n\n")[:6])
    file = client.files.create(file=("normans.txt", text.encode()), purpose="assistants")
    other = client.files.create(file=("other.txt", b"Not attached to the store."), purpose="assistants")
    store = client.vector_stores.create(name="chat", file_ids=[file.id])
    deadline = time.monotonic() + 120
    while client.vector_stores.files.retrieve(file.id, vector_store_id=store.id).status == "in_progress":
        assert time.monotonic() < deadline, "ingestion did not finish"
        time.sleep(0.2)

    parts = client.vector_stores.files.content(file.id, vector_store_id=store.id).data
    assert len(parts) >= 2 and all(p.type == "text" for p in parts)
    offsets = [(p.model_extra["start_offset"], p.model_extra["end_offset"]) for p in parts]
    assert offsets == sorted(offsets) and offsets[0][0] == 0
    for part, (start, end) in zip(parts, offsets, strict=True):
        assert text[start:end] == part.text  # a plain-text file's offsets are offsets into the file itself
        assert part.model_extra["chunk_id"].startswith(file.id)
    # Together the chunks cover the whole text (they may overlap; only the blank lines between them may be left out).
    covered = set().union(*(range(start, end) for start, end in offsets))
    assert all(i in covered for i, char in enumerate(text) if not char.isspace())
    # The chunk ids are those a search (and so a citation) names.
    hit = client.vector_stores.search(store.id, query="Rollo Norse leader").data[0]
    assert hit.model_extra["chunk_id"] in {p.model_extra["chunk_id"] for p in parts}

    with pytest.raises(openai.NotFoundError):  # a file of the tenant's, but not in this store
        client.vector_stores.files.content(other.id, vector_store_id=store.id)
    with pytest.raises(openai.NotFoundError):  # another tenant's store: exactly as one that does not exist
        _client(gateway, gateway.other_key).vector_stores.files.content(file.id, vector_store_id=store.id)
    with pytest.raises(openai.BadRequestError):  # an id of another shape is refused before any lookup
        client.vector_stores.files.content("nope", vector_store_id=store.id)

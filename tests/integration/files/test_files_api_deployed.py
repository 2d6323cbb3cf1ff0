"""The files API on the deployed stores: the real openai SDK -> the real gateway configured as deployed storage
(DynamoDB items in the conversations table, bodies and vectors in its S3 bucket) -> moto's server over HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator

import boto3
import openai
import pytest

from functions.files.backends import open_vector_index
from functions.jobs.vector_maintenance import maintain_from_settings
from shared.settings import Settings
from shared.storage.aws.conversations import AwsStoreConfig, ensure_resources
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.documents import pdf_with_pages
from tests.support.moto_server import DUMMY_CREDENTIALS, moto_server, unique_names
from tests.support.servers import serve
from tests.support.stand_ins.embedding_stand_in import EmbeddingStandIn
from tests.support.stand_ins.stand_in import stand_in_worker

MODEL = "text-embedding-minilm"


@pytest.fixture
def deployed(gateway_for: GatewayFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Gateway, str, str]]:
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    with moto_server() as endpoint, serve(stand_in_worker("ok")) as chat, serve(EmbeddingStandIn().app()) as emb:
        table, bucket = unique_names()
        ensure_resources(AwsStoreConfig(table_name=table, bucket=bucket, endpoint_url=endpoint))
        gateway = gateway_for(
            {"mini": [chat]},
            embedding_worker_urls={MODEL: [emb]},
            conversation_store="aws",
            conversations_table=table,
            conversations_bucket=bucket,
            aws_endpoint_url=endpoint,
        )
        yield gateway, endpoint, bucket


def test_files_and_vector_stores_live_in_dynamodb_and_s3(deployed: tuple[Gateway, str, str]) -> None:
    gateway, endpoint, bucket = deployed
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.key, max_retries=0)
    pdf = pdf_with_pages([["Warranty", "The warranty lasts two years from purchase."]])
    file = client.files.create(file=("warranty.pdf", pdf), purpose="assistants")
    store = client.vector_stores.create(name="docs", file_ids=[file.id])
    deadline = time.monotonic() + 120
    while client.vector_stores.retrieve(store.id).status == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert client.vector_stores.retrieve(store.id).file_counts.completed == 1
    hit = client.vector_stores.search(store.id, query="how long is the warranty").data[0]
    assert hit.file_id == file.id and "two years" in hit.content[0].text
    assert client.files.content(file.id).content == pdf

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    keys = {item["Key"] for item in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}
    assert any(k.startswith("files/") and k.endswith(file.id) for k in keys)
    assert any(k.startswith("vectors/") and f".{store.id}.lance/" in k for k in keys)  # the store's LanceDB table
    other = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.other_key, max_retries=0)
    with pytest.raises(openai.NotFoundError):
        other.vector_stores.search(store.id, query="warranty")

    client.files.delete(file.id)
    keys = {item["Key"] for item in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}
    assert not any(file.id in k for k in keys)  # the body gone
    assert client.vector_stores.retrieve(store.id).file_counts.total == 0
    settings = Settings(conversation_store="aws", aws_endpoint_url=endpoint, conversations_bucket=bucket)
    index = open_vector_index(settings)
    try:
        [(tenant, _)] = [found for found in index.stores() if found[1] == store.id]
        assert index.count(tenant, store.id) == 0 and index.keyword_search(tenant, store.id, "warranty", 5) == []
        assert maintain_from_settings(settings, purge_now=True).failed == 0  # the job: the deleted rows' bytes go
        table = index._open(tenant, store.id)
        assert sum(f.physical_rows for f in table.to_lance().get_fragments()) == 0
    finally:
        index.close()

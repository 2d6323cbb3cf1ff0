"""`POST /v1/embeddings` end to end: the real openai SDK -> the real gateway (uvicorn, SQLite) -> the real embedding
worker process (`fleetchat embedding-worker`, all-MiniLM-L6-v2 from its package) over loopback.

The vectors equal the model's own sentence-transformers pipeline (Transformer, mean pooling, Normalize) to 1e-4 in
float and base64 (the SDK's default); bad input is an OpenAI error and changes nothing; the ledger records the tokens
under the embedding model; rate limits apply; the gateway counts inputs and tokens."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from fastapi import FastAPI

from shared.fleet.embedding_pools import count_tokens
from shared.fleet.tables import tables
from shared.fleet.tiers import LimitOverrides
from shared.storage.accounts import TenantChanges
from shared.storage.sqlite.accounts import SQLiteStore
from shared.wire.embeddings_api import decode_vector
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.openai_contract import openai_registry, violations
from tests.support.processes import embedding_worker_process, free_port
from tests.support.servers import serve
from tests.support.stand_ins.stand_in import stand_in_worker

MODEL = "text-embedding-minilm"
TEXTS = [
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog",
    "Embeddings map text to vectors; similar meanings land close together.",
    "ok",
    "Ünïcödé, emoji 🙂 and numbers 12345 all tokenize.",
]


@pytest.fixture(scope="module")
def embedding_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedding_worker_process(tmp_path_factory.mktemp("embedding-worker-logs")) as url:
        yield url


@pytest.fixture(scope="module")
def reference() -> Any:
    """The model's own pipeline, as sentence-transformers runs it from the package directory."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(tables().embedding_pools[MODEL].local.directory()), device="cpu")
    assert [type(module).__name__ for module in model] == ["Transformer", "Pooling", "Normalize"]
    return lambda texts: model.encode(texts, convert_to_numpy=True, normalize_embeddings=False)


@pytest.fixture
def gateway(gateway_for: GatewayFactory, embedding_worker: str) -> Iterator[Gateway]:
    with serve(stand_in_worker("ok")) as chat_worker:
        yield gateway_for({"mini": [chat_worker]}, embedding_worker_urls={MODEL: [embedding_worker]})


def _client(gateway: Gateway, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.key, max_retries=0, **kwargs)


def _rows(gateway: Gateway, table: str) -> list[dict[str, Any]]:
    with sqlite3.connect(gateway.data_dir / "fleetchat.db") as db:
        db.row_factory = sqlite3.Row
        return [dict(row) for row in db.execute(f"SELECT * FROM {table}").fetchall()]


def test_the_sdk_embeds_a_string_as_floats_equal_to_sentence_transformers(gateway: Gateway, reference: Any) -> None:
    response = _client(gateway).embeddings.create(model=MODEL, input=TEXTS[2], encoding_format="float")
    assert response.object == "list" and response.model == MODEL
    (item,) = response.data
    assert item.object == "embedding" and item.index == 0 and len(item.embedding) == 384
    np.testing.assert_allclose(np.array(item.embedding), reference([TEXTS[2]])[0], atol=1e-4)
    tokens = count_tokens(tables().embedding_pools[MODEL], [TEXTS[2]])[0]
    assert response.usage.prompt_tokens == response.usage.total_tokens == tokens


def test_a_batch_of_embeddings_answers_each_line_with_the_same_vectors(gateway: Gateway, reference: Any) -> None:
    """`/v1/embeddings` as a batch endpoint (docs/batches.md): each line's vectors are those of a direct call, and
    the ledger bills the lines at the batch price."""
    api = _client(gateway, timeout=60)
    lines = [
        {"custom_id": "pair", "method": "POST", "url": "/v1/embeddings",
         "body": {"model": MODEL, "input": TEXTS[:2], "encoding_format": "float"}},
        {"custom_id": "one", "method": "POST", "url": "/v1/embeddings", "body": {"model": MODEL, "input": TEXTS[2]}},
    ]  # fmt: skip
    jsonl = "".join(json.dumps(line) + "\n" for line in lines).encode()
    uploaded = api.files.create(file=("embed.jsonl", jsonl), purpose="batch")
    batch = api.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
    deadline = time.monotonic() + 60
    while (batch := api.batches.retrieve(batch.id)).status not in ("completed", "failed"):
        assert time.monotonic() < deadline, batch
        time.sleep(0.2)
    assert batch.status == "completed" and batch.request_counts is not None and batch.request_counts.completed == 2
    assert batch.output_file_id is not None
    output = {
        line["custom_id"]: line
        for line in map(json.loads, api.files.content(batch.output_file_id).text.split("\n")[:-1])
    }
    pair = [item["embedding"] for item in output["pair"]["response"]["body"]["data"]]
    np.testing.assert_allclose(np.array(pair), reference(TEXTS[:2]), atol=1e-4)
    one = output["one"]["response"]["body"]["data"][0]["embedding"]
    np.testing.assert_allclose(decode_vector(one), reference([TEXTS[2]])[0], atol=1e-4)  # the default: base64
    billed = [row for row in _rows(gateway, "ledger") if row["request_id"].startswith("batch_req_")]
    assert len(billed) == 2 and {row["price_class"] for row in billed} == {"batch"}


def test_the_body_validates_against_openais_published_schema(gateway: Gateway) -> None:
    """tests/contracts/openai_schemas.json (OpenAI's own description, pinned by commit). Its schema knows only float
    arrays; with `encoding_format: base64` OpenAI's API (and fleetchat) send each vector as a base64 string, which
    the SDK decodes: that one known gap is allowed, nothing else."""
    registry = openai_registry()
    found = []
    for encoding in ("float", "base64"):
        body = {"model": MODEL, "input": TEXTS[:2], "encoding_format": encoding}
        response = httpx.post(
            f"{gateway.url}/v1/embeddings", json=body, headers={"authorization": f"Bearer {gateway.key}"}, timeout=60
        )
        assert response.status_code == 200, response.text
        answer = response.json()
        if encoding == "base64":
            assert all(isinstance(item["embedding"], str) for item in answer["data"])
            answer = {**answer, "data": [{**item, "embedding": [0.0]} for item in answer["data"]]}  # the known gap
        found += violations(registry, "CreateEmbeddingResponse", answer)
    assert found == []


def test_the_sdks_default_is_base64_and_decodes_to_the_same_vectors(gateway: Gateway, reference: Any) -> None:
    sent: list[dict[str, Any]] = []
    hooks = {"request": [lambda request: sent.append(json.loads(request.content))]}
    with httpx.Client(event_hooks=hooks) as http:
        response = _client(gateway, http_client=http).embeddings.create(model=MODEL, input=TEXTS)
    assert sent[0]["encoding_format"] == "base64"  # the SDK asks for base64 when numpy is installed, then decodes it
    assert [item.index for item in response.data] == list(range(len(TEXTS)))
    got = np.array([item.embedding for item in response.data])
    np.testing.assert_allclose(got, reference(TEXTS), atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert response.usage.prompt_tokens == sum(count_tokens(tables().embedding_pools[MODEL], TEXTS))


def test_base64_is_little_endian_float32_bytes(gateway: Gateway, reference: Any) -> None:
    body = {"model": MODEL, "input": TEXTS[:2], "encoding_format": "base64", "dimensions": 384, "user": "u-1"}
    raw = httpx.post(f"{gateway.url}/v1/embeddings", json=body, headers=gateway.headers())
    assert raw.status_code == 200, raw.text
    data = raw.json()["data"]
    assert all(isinstance(item["embedding"], str) for item in data)
    vectors = np.array([decode_vector(item["embedding"]) for item in data])
    assert vectors.shape == (2, 384)
    np.testing.assert_allclose(vectors, reference(TEXTS[:2]), atol=1e-4)


def test_concurrent_requests_of_many_lengths_each_get_their_own_vectors(gateway: Gateway, reference: Any) -> None:
    """Concurrent requests share forward passes (the micro-batcher) and padding: each must still get its own rows."""
    batches = [[f"{text} ({i})" * (1 + i % 4) for text in TEXTS[: 1 + i % len(TEXTS)]] for i in range(12)]
    client = _client(gateway)
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(lambda texts: client.embeddings.create(model=MODEL, input=texts), batches))
    for texts, answer in zip(batches, answers, strict=True):
        np.testing.assert_allclose(np.array([d.embedding for d in answer.data]), reference(texts), atol=1e-4)


def test_tokens_are_metered_under_the_embedding_model_and_counted(gateway: Gateway) -> None:
    raw = httpx.post(f"{gateway.url}/v1/embeddings", json={"model": MODEL, "input": TEXTS}, headers=gateway.headers())
    assert raw.status_code == 200
    assert raw.headers["x-ratelimit-remaining-requests"]
    tokens = raw.json()["usage"]["prompt_tokens"]
    (entry,) = _rows(gateway, "ledger")
    assert entry["request_id"] == raw.headers["x-request-id"]
    assert entry["model"] == f"embedding:{MODEL}"
    assert (entry["prompt_tokens"], entry["completion_tokens"], entry["outcome"]) == (tokens, 0, "completed")
    key_windows = [row for row in _rows(gateway, "rate_counters") if row["scope"].startswith("key:")]
    assert sum(row["requests"] for row in key_windows) == 1 and sum(row["tokens"] for row in key_windows) == tokens
    metrics = httpx.get(f"{gateway.url}/metrics").text
    assert f'fleetchat_gateway_embedding_inputs_total{{model="{MODEL}"}} {float(len(TEXTS))}' in metrics
    assert f'fleetchat_gateway_embedding_tokens_total{{model="{MODEL}"}} {float(tokens)}' in metrics


LONG = "word " * 300  # 302 tokens with [CLS] and [SEP]: over the model's 256


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": MODEL, "input": ""}, 400, "input"),
        ({"model": MODEL, "input": []}, 400, "input"),
        ({"model": MODEL, "input": ["fine", ""]}, 400, "input"),
        ({"model": MODEL, "input": [1, 2, 3]}, 400, "input"),
        ({"model": MODEL, "input": [[1, 2], [3]]}, 400, "input"),
        ({"model": MODEL, "input": 5}, 400, None),
        ({"model": MODEL, "input": ["a", 5]}, 400, None),
        ({"model": MODEL, "input": ["x"] * 2049}, 400, "input"),
        ({"model": MODEL, "input": ["fine", LONG]}, 400, "input"),
        ({"model": MODEL, "input": "fine", "dimensions": 128}, 400, "dimensions"),
        ({"model": MODEL, "input": "fine", "encoding_format": "int8"}, 400, None),
        ({"input": "fine"}, 400, None),
        ({"model": "text-embedding-3-small", "input": "fine"}, 404, "model"),
        ({"model": "mini", "input": "fine"}, 404, "model"),  # a chat pool is not an embedding model
    ],
)
def test_bad_input_is_an_openai_error_and_changes_nothing(
    gateway: Gateway, body: dict[str, Any], status: int, param: str | None
) -> None:
    response = httpx.post(f"{gateway.url}/v1/embeddings", json=body, headers=gateway.headers())
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    if param is not None:
        assert error["param"] == param
    assert _rows(gateway, "ledger") == []
    assert _rows(gateway, "rate_counters") == []


def test_over_the_limit_is_context_length_exceeded_through_the_sdk(gateway: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        _client(gateway).embeddings.create(model=MODEL, input=["fine", LONG])
    assert refused.value.code == "context_length_exceeded"
    assert "256" in refused.value.message


def test_without_a_key_it_is_401(gateway: Gateway) -> None:
    response = httpx.post(f"{gateway.url}/v1/embeddings", json={"model": MODEL, "input": "hi"})
    assert response.status_code == 401
    assert _rows(gateway, "ledger") == []


def test_the_tenants_token_limit_applies(gateway: Gateway) -> None:
    store = SQLiteStore(gateway.data_dir / "fleetchat.db")
    try:
        owner = next(t for t in store.list_tenants() if t.name == "owner")
        store.update_tenant(owner.id, TenantChanges(limits=LimitOverrides(key_tpm=40)))
    finally:
        store.close()
    client = _client(gateway)
    client.embeddings.create(model=MODEL, input=TEXTS[0])  # 9 tokens
    with pytest.raises(openai.RateLimitError):
        client.embeddings.create(model=MODEL, input=[TEXTS[2]] * 4)  # 4 x 17 tokens: over 40 per minute
    assert len(_rows(gateway, "ledger")) == 1


def test_a_worker_that_is_down_is_a_503_and_bills_nothing(gateway_for: GatewayFactory, tmp_path: Path) -> None:
    with serve(stand_in_worker("ok")) as chat_worker:
        down = f"http://127.0.0.1:{free_port()}"
        gateway = gateway_for({"mini": [chat_worker]}, embedding_worker_urls={MODEL: [down]})
        response = httpx.post(
            f"{gateway.url}/v1/embeddings", json={"model": MODEL, "input": "hi"}, headers=gateway.headers()
        )
    assert response.status_code == 503 and response.headers["retry-after"]
    assert _rows(gateway, "ledger") == []


def test_a_wrong_worker_answer_is_a_502_billing_nothing(gateway_for: GatewayFactory) -> None:
    broken = FastAPI()

    @broken.post("/v1/embeddings")
    async def one_vector_too_few(body: dict) -> dict:
        return {"object": "list", "data": [], "model": MODEL, "usage": {"prompt_tokens": 1, "total_tokens": 1}}

    with serve(stand_in_worker("ok")) as chat_worker, serve(broken) as embedding_worker:
        gateway = gateway_for({"mini": [chat_worker]}, embedding_worker_urls={MODEL: [embedding_worker]})
        response = httpx.post(
            f"{gateway.url}/v1/embeddings", json={"model": MODEL, "input": "hi"}, headers=gateway.headers()
        )
    assert response.status_code == 502 and response.json()["error"]["type"] == "server_error"
    assert _rows(gateway, "ledger") == []


def test_the_bench_phase_measures_inputs_per_second_through_the_gateway(gateway: Gateway, tmp_path: Path) -> None:
    """The `make bench` embeddings phase, shrunk: three levels, every request answered, the ratios computed."""
    from rich.progress import Progress

    from functions.offline.bench.phases.embeddings_phase import embeddings_phase, sentence
    from functions.offline.bench.results.embeddings_results import embeddings_lines

    assert len({sentence(i) for i in range(64)}) == 64  # distinct inputs: nothing is served from a cache
    with Progress(disable=True) as progress:
        result = asyncio.run(
            embeddings_phase(
                gateway.url, progress, keys_path=tmp_path / "keys.json", admin_key=None, api_key=gateway.key,
                inputs=32, concurrency=4,
            )
        )  # fmt: skip
    assert [(level.batch, level.concurrency) for level in result.levels] == [(1, 1), (1, 4), (32, 4)]
    assert all(level.errors == 0 and level.inputs_per_s > 0 for level in result.levels), result.levels
    assert result.batch32_over_batch1 == result.levels[2].inputs_per_s / result.levels[1].inputs_per_s
    report = "\n".join(embeddings_lines(result))
    assert "## Embeddings throughput" in report and "batch 32, 4 concurrent" in report

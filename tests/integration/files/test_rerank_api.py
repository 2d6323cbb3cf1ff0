"""`POST /v1/rerank` and `/v2/rerank` end to end: the real `cohere` SDK (and raw HTTP in Jina's and vLLM's forms) ->
the real gateway (uvicorn, SQLite) -> the real embedding worker process serving the local re-rank pool's fused rank
(`fleetchat embedding-worker --rerank rerank-minilm`, all-MiniLM-L6-v2 from its package) over loopback.

What is checked here is the service, not the scorer's quality (that is `fleetchat eval beir --rerank`, on BEIR):
the order follows the worker's scores, `top_n`, `return_documents`, object documents and `rank_fields` are honoured,
a long document is read window by window, the ledger bills the exact pair tokens on the re-rank meter's ledger name,
and bad input is an OpenAI error object that charges nothing."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import cohere
import httpx
import openai
import pytest
from fastapi import FastAPI

from shared.fleet.rerank_pools import prepared_pairs
from shared.fleet.tables import tables
from shared.fleet.tiers import LimitOverrides
from shared.storage.accounts import TenantChanges
from shared.storage.sqlite.accounts import SQLiteStore
from shared.wire.rerank_api import RerankRequest
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.processes import embedding_worker_process, free_port
from tests.support.servers import serve
from tests.support.stand_ins.stand_in import stand_in_worker

POOL = "rerank-minilm"
EMBEDDING = "text-embedding-minilm"
QUERY = "What is the capital of the United States?"
DOCUMENTS = [
    "Carson City is the capital city of the American state of Nevada.",
    "The Commonwealth of the Northern Mariana Islands is a group of islands in the Pacific Ocean.",
    "Washington, D.C. is the capital of the United States. It is a federal district.",
    "Capital punishment has existed in the United States since before it was a country.",
]


@pytest.fixture(scope="module")
def rerank_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedding_worker_process(tmp_path_factory.mktemp("rerank-worker-logs"), "--rerank", POOL) as url:
        yield url


@pytest.fixture
def gateway(gateway_for: GatewayFactory, rerank_worker: str) -> Iterator[Gateway]:
    with serve(stand_in_worker("ok")) as chat_worker:
        yield gateway_for(
            {"mini": [chat_worker]},
            embedding_worker_urls={EMBEDDING: [rerank_worker]},
            rerank_worker_urls={POOL: [rerank_worker]},
        )


def _ledger(gateway: Gateway) -> list[dict[str, Any]]:
    with sqlite3.connect(gateway.data_dir / "fleetchat.db") as db:
        db.row_factory = sqlite3.Row
        return [dict(row) for row in db.execute("SELECT * FROM ledger").fetchall()]


def _post(gateway: Gateway, body: dict[str, Any], path: str = "/v1/rerank") -> httpx.Response:
    headers = {"authorization": f"Bearer {gateway.key}"}
    return httpx.post(f"{gateway.url}{path}", json=body, headers=headers, timeout=60)


def _tokens(body: dict[str, Any]) -> int:
    return prepared_pairs(tables().rerank_pools[POOL], RerankRequest.model_validate(body)).tokens


def test_cohere_v2_ranks_the_answer_first_and_the_ledger_bills_the_pair_tokens(gateway: Gateway) -> None:
    client = cohere.ClientV2(api_key=gateway.key, base_url=gateway.url, timeout=60)
    response = client.rerank(model=POOL, query=QUERY, documents=DOCUMENTS, top_n=3)
    assert response.results[0].index == 2
    assert len(response.results) == 3
    scores = [r.relevance_score for r in response.results]
    assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)
    tokens = _tokens({"model": POOL, "query": QUERY, "documents": DOCUMENTS})
    assert response.meta is not None and response.meta.billed_units is not None
    assert response.meta.billed_units.input_tokens == tokens
    (entry,) = _ledger(gateway)
    assert entry["model"] == f"rerank:{POOL}" and entry["prompt_tokens"] == tokens
    assert entry["completion_tokens"] == 0 and entry["outcome"] == "completed"


def test_cohere_v1_object_documents_ranked_on_named_fields_come_back_as_sent(gateway: Gateway) -> None:
    client = cohere.Client(api_key=gateway.key, base_url=gateway.url, timeout=60)
    documents = [
        {"title": "Nevada", "body": DOCUMENTS[0], "id": "a"},
        {"title": "USA", "body": DOCUMENTS[2], "id": "b"},
    ]
    response = client.rerank(
        model=POOL, query=QUERY, documents=documents, rank_fields=["title", "body"], return_documents=True
    )
    assert [r.index for r in response.results] == [1, 0]
    first = response.results[0].document
    assert first is not None and first.dict()["id"] == "b"  # the object as sent, not only its text


def test_jina_and_vllm_forms_top_n_zero_is_all_and_documents_can_be_left_out(gateway: Gateway) -> None:
    jina = _post(gateway, {"model": POOL, "query": QUERY, "documents": [{"text": d} for d in DOCUMENTS], "top_n": 2})
    assert jina.status_code == 200, jina.text
    body = jina.json()
    assert [r["document"]["text"] for r in body["results"]] == [DOCUMENTS[r["index"]] for r in body["results"]]
    assert len(body["results"]) == 2 and body["usage"]["total_tokens"] > 0
    vllm = _post(
        gateway, {"model": POOL, "query": QUERY, "documents": DOCUMENTS, "top_n": 0, "return_documents": False}
    )
    assert vllm.status_code == 200, vllm.text
    results = vllm.json()["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3] and all("document" not in r for r in results)
    v2 = _post(gateway, {"model": POOL, "query": QUERY, "documents": DOCUMENTS}, path="/v2/rerank")
    assert v2.status_code == 200 and [r["index"] for r in v2.json()["results"]] == [r["index"] for r in results]


def test_a_long_document_is_read_in_windows_and_scores_as_its_best(gateway: Gateway) -> None:
    """The answer sits after ~900 tokens of filler: one pair of 512 tokens would never see it."""
    filler = " ".join(["The committee reviewed the quarterly figures for the regional office."] * 80)
    long = f"{filler} Washington, D.C. is the capital of the United States."
    documents = [DOCUMENTS[1], long, filler]
    body = {"model": POOL, "query": QUERY, "documents": documents, "return_documents": False}
    answer = _post(gateway, body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["results"][0]["index"] == 1
    assert answer.json()["usage"]["total_tokens"] == _tokens(body)
    cut = _post(gateway, {**body, "max_chunks_per_doc": 1})  # the first window only: the answer is never read
    assert cut.status_code == 200 and cut.json()["usage"]["total_tokens"] < answer.json()["usage"]["total_tokens"]
    scores = {r["index"]: r["relevance_score"] for r in cut.json()["results"]}
    assert abs(scores[1] - scores[2]) < 0.05  # the two documents' first windows are the same filler


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": POOL, "query": QUERY, "documents": []}, 400, "documents"),
        ({"model": POOL, "query": "  ", "documents": DOCUMENTS}, 400, "query"),
        ({"model": "no-such-reranker", "query": QUERY, "documents": DOCUMENTS}, 404, "model"),
        ({"model": POOL, "query": QUERY, "documents": [{"title": "x"}]}, 400, "documents"),
        ({"model": POOL, "query": QUERY, "documents": DOCUMENTS, "top_k": 2}, 400, None),
        ({"model": POOL, "query": "word " * 300, "documents": DOCUMENTS}, 400, "query"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/rerank", "/v2/rerank"])
def test_bad_input_is_an_openai_error_and_charges_nothing(
    gateway: Gateway, body: dict[str, Any], status: int, param: str | None, path: str
) -> None:
    answer = _post(gateway, body, path)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["message"] and error["type"]
    if param is not None:
        assert error["param"] == param
    assert _ledger(gateway) == []


def test_the_worker_speaks_vllms_rerank_protocol_and_refuses_a_pair_too_long(rerank_worker: str) -> None:
    answer = httpx.post(f"{rerank_worker}/v1/rerank", json={"model": POOL, "query": QUERY, "documents": DOCUMENTS})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"id", "model", "usage", "results"} and set(body["usage"]) == {"total_tokens"}
    assert all(set(r) == {"index", "document", "relevance_score"} for r in body["results"])
    too_long = httpx.post(
        f"{rerank_worker}/v1/rerank", json={"model": POOL, "query": QUERY, "documents": ["word " * 600]}
    )
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "documents"


def test_models_lists_the_rerank_pool(gateway: Gateway) -> None:
    answer = httpx.get(f"{gateway.url}/v1/models", headers={"authorization": f"Bearer {gateway.key}"})
    card = next(m for m in answer.json()["data"] if m["id"] == POOL)
    assert card["capabilities"]["rerank"] is True and card["max_model_len"] == 512


def _searched_store(gateway: Gateway) -> list[dict[str, Any]]:
    """A store of the four documents (one file each), searched through the store's search endpoint (chat's ranking);
    the hits as the endpoint answers them."""
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.key, max_retries=0, timeout=60)
    store = client.vector_stores.create(name="capitals")
    for i, text in enumerate(DOCUMENTS):
        file = client.files.create(file=(f"doc-{i}.txt", text.encode()), purpose="assistants")
        client.vector_stores.files.create(store.id, file_id=file.id)
    deadline = time.monotonic() + 120
    while client.vector_stores.retrieve(store.id).file_counts.completed < len(DOCUMENTS):
        assert time.monotonic() < deadline, "ingestion did not finish"
        time.sleep(0.2)
    return [hit.model_dump() for hit in client.vector_stores.search(store.id, query=QUERY, max_num_results=4).data]


def test_retrievals_rerank_stage_scores_with_the_pool_and_bills_it(
    gateway_for: GatewayFactory, rerank_worker: str
) -> None:
    with serve(stand_in_worker("ok")) as chat_worker:
        gateway = gateway_for(
            {"mini": [chat_worker]}, embedding_worker_urls={EMBEDDING: [rerank_worker]},
            rerank_worker_urls={POOL: [rerank_worker]}, retrieval={"rerank_model": POOL},
        )  # fmt: skip
        hits = _searched_store(gateway)
    assert hits[0]["content"][0]["text"] == DOCUMENTS[2]
    direct = _post(gateway, {"model": POOL, "query": QUERY, "documents": [h["content"][0]["text"] for h in hits]})
    pool_scores = {DOCUMENTS.index(h["content"][0]["text"]): h["score"] for h in hits}
    for result in direct.json()["results"]:  # the hits carry the pool's own scores
        text = result["document"]["text"]
        assert pool_scores[DOCUMENTS.index(text)] == pytest.approx(result["relevance_score"], abs=1e-6)
    assert any(entry["model"] == f"rerank:{POOL}" for entry in _ledger(gateway))


def test_a_failing_rerank_pool_leaves_the_built_in_rerank_answering(
    gateway_for: GatewayFactory, rerank_worker: str
) -> None:
    with serve(stand_in_worker("ok")) as chat_worker:
        gateway = gateway_for(
            {"mini": [chat_worker]}, embedding_worker_urls={EMBEDDING: [rerank_worker]},
            rerank_worker_urls={POOL: [f"http://127.0.0.1:{free_port()}"]}, retrieval={"rerank_model": POOL},
        )  # fmt: skip
        hits = _searched_store(gateway)
    assert hits and hits[0]["content"][0]["text"] == DOCUMENTS[2]
    assert not any(entry["model"].startswith("rerank:") for entry in _ledger(gateway))  # nothing billed for it


def test_the_tenants_token_limit_applies(gateway: Gateway) -> None:
    store = SQLiteStore(gateway.data_dir / "fleetchat.db")
    try:
        owner = next(t for t in store.list_tenants() if t.name == "owner")
        store.update_tenant(owner.id, TenantChanges(limits=LimitOverrides(key_tpm=120)))
    finally:
        store.close()
    small = {"model": POOL, "query": QUERY, "documents": DOCUMENTS[:1]}
    assert _tokens(small) < 120 and _post(gateway, small).status_code == 200
    over = _post(gateway, {"model": POOL, "query": QUERY, "documents": DOCUMENTS})  # over 120 pair tokens a minute
    assert over.status_code == 429 and over.headers["retry-after"]
    assert len(_ledger(gateway)) == 1


def test_a_worker_that_is_down_is_a_503_and_bills_nothing(gateway_for: GatewayFactory) -> None:
    with serve(stand_in_worker("ok")) as chat_worker:
        down = f"http://127.0.0.1:{free_port()}"
        gateway = gateway_for({"mini": [chat_worker]}, embedding_worker_urls={}, rerank_worker_urls={POOL: [down]})
        response = _post(gateway, {"model": POOL, "query": QUERY, "documents": DOCUMENTS})
    assert response.status_code == 503 and response.headers["retry-after"]
    assert _ledger(gateway) == []


def test_a_wrong_worker_answer_is_a_502_billing_nothing(gateway_for: GatewayFactory) -> None:
    broken = FastAPI()

    @broken.post("/v1/rerank")
    async def one_score_too_few(body: dict) -> dict:
        results = [{"index": 0, "relevance_score": 0.5, "document": {"text": body["documents"][0]}}]
        return {"id": "x", "model": POOL, "usage": {"total_tokens": 9}, "results": results}

    with serve(stand_in_worker("ok")) as chat_worker, serve(broken) as rerank_worker:
        gateway = gateway_for(
            {"mini": [chat_worker]}, embedding_worker_urls={}, rerank_worker_urls={POOL: [rerank_worker]}
        )
        response = _post(gateway, {"model": POOL, "query": QUERY, "documents": DOCUMENTS})
    assert response.status_code == 502 and response.json()["error"]["type"] == "server_error"
    assert _ledger(gateway) == []

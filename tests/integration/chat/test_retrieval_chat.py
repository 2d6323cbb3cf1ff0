"""Retrieval in chat end to end: the real openai SDK -> the real gateway (uvicorn, SQLite) with its files and vector
stores -> the real embedding worker process (all-MiniLM-L6-v2) over loopback; a stand-in chat worker records what the
model was sent. Documents are public SQuAD articles (functions/offline/evals/rag/data), each question's answer located
in them, so a citation is checked by its offsets.

Checked: citations in the JSON body and on a stream's first chunk, and stored with the turn; the Responses API's
`file_search_call` item and `file_citation` annotations; the passages reach the
worker as a context message right before the question; another tenant's store is a 404 that charges nothing; an
embedding slower than the latency budget skips retrieval (header and field) and the chat is still answered."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI

from functions.offline.evals.rag.items import Document, Question, load_documents, load_questions
from shared.wire.retrieval_api import RETRIEVAL_HEADER
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.openai_contract import openai_registry, violations
from tests.support.processes import embedding_worker_process
from tests.support.servers import serve
from tests.support.stand_ins.embedding_stand_in import EmbeddingStandIn
from tests.support.stand_ins.stand_in import stand_in_worker

MODEL = "text-embedding-minilm"
QUESTION_ID = "squad/56ddde6b9a695914005b962b"  # "Who was the Norse leader?" -> Rollo, in the Normans article


@pytest.fixture(scope="module")
def embedding_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedding_worker_process(
        tmp_path_factory.mktemp("embedding-worker-logs"), "--threads", "1", timeout_s=180
    ) as url:
        yield url


@pytest.fixture(scope="module")
def documents() -> dict[str, Document]:
    return {d.id: d for d in load_documents() if d.title in ("Normans", "Sky_(United_Kingdom)")}


@pytest.fixture(scope="module")
def question() -> Question:
    return next(q for q in load_questions() if q.id == QUESTION_ID)


def _client(gateway: Gateway, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key or gateway.key, max_retries=0, timeout=120)


def _vector_store(client: openai.OpenAI, documents: dict[str, Document]) -> tuple[str, dict[str, str]]:
    """A store holding the documents, ingested; (store id, document id by file id)."""
    files = {
        client.files.create(file=(d.filename, d.text.encode(), "text/plain"), purpose="assistants").id: d.id
        for d in documents.values()
    }
    store = client.vector_stores.create(name="squad", file_ids=list(files))
    deadline = time.monotonic() + 300
    while (counts := client.vector_stores.retrieve(store.id).file_counts).completed < len(files):
        assert counts.failed == 0, counts
        assert time.monotonic() < deadline, f"ingestion did not finish: {counts}"
        time.sleep(0.5)
    return store.id, files


def _context_of(body: dict[str, Any]) -> str | None:
    """The context message the worker got: a system message right before the last (user) message."""
    messages = body["messages"]
    before = messages[-2] if len(messages) >= 2 else None
    return before["content"] if before and before["role"] == "system" and "[1]" in before["content"] else None


def _ledger_rows(gateway: Gateway) -> int:
    with sqlite3.connect(gateway.data_dir / "fleetchat.db") as db:
        return db.execute("SELECT COUNT(*) FROM ledger").fetchone()[0]


@pytest.fixture
def stack(gateway_for: GatewayFactory, embedding_worker: str) -> Iterator[tuple[Gateway, FastAPI]]:
    worker = stand_in_worker("Rollo led them [1].")
    with serve(worker) as chat_worker:
        gateway = gateway_for(
            {"mini": [chat_worker], "flagship": [chat_worker]}, embedding_worker_urls={MODEL: [embedding_worker]}
        )
        yield gateway, worker


def test_a_chat_with_vector_stores_cites_the_supporting_passage_and_stores_it(
    stack: tuple[Gateway, FastAPI], documents: dict[str, Document], question: Question
) -> None:
    gateway, worker = stack
    client = _client(gateway)
    store_id, files = _vector_store(client, documents)
    raw = client.chat.completions.with_raw_response.create(
        model="mini",
        messages=[{"role": "user", "content": question.question}],
        extra_body={"vector_store_ids": [store_id], "store": True},
    )
    assert raw.headers[RETRIEVAL_HEADER] == "used"
    completion = raw.parse()
    report = completion.model_extra["retrieval"]
    assert report["status"] == "used" and report["vector_store_ids"] == [store_id]
    citations = report["citations"]
    assert [c["index"] for c in citations] == list(range(1, len(citations) + 1))
    ours = [c for c in citations if files[c["file_id"]] == question.document_id]
    assert ours and len(ours) >= len(citations) - 1, citations  # the Normans article, not Sky's
    assert any(a.text in c["text"] for c in ours for a in question.answers)  # a passage that names Rollo
    for c in citations:  # each citation's text is the file's text at its offsets
        assert documents[files[c["file_id"]]].text[c["start"] : c["end"]] == c["text"]
        assert c["filename"] in {d.filename for d in documents.values()} and c["vector_store_id"] == store_id
    context = _context_of(worker.state.bodies[-1])
    assert context is not None and worker.state.bodies[-1]["messages"][-1]["content"] == question.question
    assert "Rollo" in context and f"[1] {citations[0]['filename']}" in context
    assert "vector_store_ids" not in worker.state.bodies[-1]  # the gateway searched; the worker never sees it
    stored = httpx.get(
        f"{gateway.url}/v1/conversations/{completion.model_extra['conversation']['id']}", headers=gateway.headers()
    ).json()
    answer = stored["messages"][-1]
    assert [m["role"] for m in stored["messages"]] == ["user", "assistant"]  # the context message is not stored
    assert answer["citations"] == [{**c, "text": None} for c in citations]  # stored without the passage text


def test_a_streamed_chat_with_the_file_search_tool_carries_citations_on_its_first_chunk(
    stack: tuple[Gateway, FastAPI], documents: dict[str, Document], question: Question
) -> None:
    gateway, worker = stack
    client = _client(gateway)
    store_id, _ = _vector_store(client, documents)
    chunks = list(
        client.chat.completions.create(
            model="mini",
            messages=[{"role": "user", "content": question.question}],
            tools=[{"type": "file_search", "vector_store_ids": [store_id], "max_num_results": 2}],  # type: ignore[list-item]
            stream=True,
        )
    )
    report = chunks[0].model_extra["retrieval"]
    assert report["status"] == "used" and 1 <= len(report["citations"]) <= 2
    assert all("retrieval" not in (c.model_extra or {}) for c in chunks[1:])
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Rollo led them [1]."
    sent = worker.state.bodies[-1]
    assert "tools" not in sent and "file_search" not in sent and _context_of(sent) is not None


def test_another_tenants_vector_store_is_a_404_and_charges_nothing(
    stack: tuple[Gateway, FastAPI], documents: dict[str, Document]
) -> None:
    gateway, worker = stack
    store_id, _ = _vector_store(_client(gateway), documents)
    before, calls = _ledger_rows(gateway), worker.state.calls
    for body in (
        {"vector_store_ids": [store_id]},
        {"tools": [{"type": "file_search", "vector_store_ids": [store_id]}]},
    ):
        with pytest.raises(openai.NotFoundError) as refused:
            _client(gateway, gateway.other_key).chat.completions.create(
                model="mini", messages=[{"role": "user", "content": "What is in it?"}], extra_body=body
            )
        assert refused.value.body["param"] == "vector_store_ids"  # type: ignore[index]
    assert (_ledger_rows(gateway), worker.state.calls) == (before, calls)


def test_retrieval_over_its_latency_budget_is_skipped_and_the_chat_answered(
    gateway_for: GatewayFactory, documents: dict[str, Document], monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = EmbeddingStandIn()
    worker = stand_in_worker("answered without passages")
    monkeypatch.setenv("FLEETCHAT_RETRIEVAL_BUDGET_MS", "400")
    with serve(slow.app()) as embedding, serve(worker) as chat_worker:
        gateway = gateway_for({"mini": [chat_worker]}, embedding_worker_urls={MODEL: [embedding]})
        client = _client(gateway)
        store_id, _ = _vector_store(client, documents)  # ingested at full speed
        slow.delay_s = 5.0  # from now on every embedding (the question's) takes 5 s
        raw = client.chat.completions.with_raw_response.create(
            model="mini",
            messages=[{"role": "user", "content": "Who was the Norse leader?"}],
            extra_body={"vector_store_ids": [store_id]},
        )
    assert raw.headers[RETRIEVAL_HEADER] == "skipped"
    completion = raw.parse()
    report = completion.model_extra["retrieval"]
    assert (report["status"], report["reason"], report["citations"]) == ("skipped", "latency_budget", [])
    assert 400 <= report["elapsed_ms"] < 5000 and report["budget_ms"] == 400  # cut at the budget, not the embedding
    assert completion.choices[0].message.content == "answered without passages"
    assert _context_of(worker.state.bodies[-1]) is None and len(worker.state.bodies[-1]["messages"]) == 1
    metrics = httpx.get(f"{gateway.url}/metrics").text
    assert 'fleetchat_gateway_retrieval_requests_total{reason="latency_budget",status="skipped"} 1.0' in metrics


def test_a_response_with_file_search_reports_the_search_and_cites_the_file(
    stack: tuple[Gateway, FastAPI], documents: dict[str, Document], question: Question
) -> None:
    """The Responses API's shapes of the same retrieval: a `file_search_call` item (with its results when included),
    `file_citation` annotations at the answer's markers, the same when retrieved later, and valid against OpenAI's
    published schemas, whole and streamed."""
    gateway, _ = stack
    client = _client(gateway)
    store_id, files = _vector_store(client, documents)
    search = {"type": "file_search", "vector_store_ids": [store_id], "max_num_results": 2}
    response = client.responses.create(
        model="mini",
        input=question.question,
        tools=[search],
        include=["file_search_call.results"],  # type: ignore[list-item]
    )
    called, message = response.output
    assert called.type == "file_search_call" and called.status == "completed"
    assert called.queries == [question.question]  # type: ignore[union-attr]
    results = called.results or []  # type: ignore[union-attr]
    assert 1 <= len(results) <= 2 and all(r.file_id in files for r in results)
    assert message.type == "message" and response.output_text == "Rollo led them [1]."
    (annotation,) = message.content[0].annotations  # type: ignore[union-attr]
    assert annotation.type == "file_citation" and annotation.index == response.output_text.index("[1]")
    assert annotation.file_id in files  # type: ignore[union-attr]
    registry = openai_registry()
    assert violations(registry, "Response", response.model_dump(mode="json", exclude_unset=True)) == []

    retrieved = client.responses.retrieve(response.id)
    assert [item.type for item in retrieved.output] == ["file_search_call", "message"]
    assert retrieved.output[1].content[0].annotations == message.content[0].annotations  # type: ignore[union-attr]

    with client.responses.stream(model="mini", input=question.question, tools=[search], store=False) as stream:  # type: ignore[list-item]
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.file_search_call.completed" in kinds
    assert [item.type for item in final.output] == ["file_search_call", "message"]

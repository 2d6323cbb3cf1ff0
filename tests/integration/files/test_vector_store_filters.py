"""OpenAI's `filters` and `ranking_options` on vector-store search and on chat's `file_search` tool, end to end: the
real openai SDK -> the real gateway (uvicorn, SQLite) -> a stand-in embedding worker over loopback (hashed bags of
words: texts sharing words are near), files attached with `attributes`. Filters keep exactly the files whose
attributes pass them, in both the vector and the hybrid ranking and in chat's citations; a score threshold drops the
weaker results; a malformed filter or ranking option is a 400 that changes nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.servers import serve
from tests.support.stand_ins.embedding_stand_in import EmbeddingStandIn
from tests.support.stand_ins.stand_in import stand_in_worker

MODEL = "text-embedding-minilm"
# Three notes that all answer the query's words, told apart only by their attributes.
NOTES = {
    "support-2024.md": ({"team": "support", "year": 2024, "public": True}, "The desk opens at nine. Opening hours."),
    "billing-2025.md": ({"team": "billing", "year": 2025, "public": False}, "Invoices go out at nine. Opening hours."),
    "support-2026.md": ({"team": "support", "year": 2026}, "The new desk opens at eight. Opening hours."),
}
QUERY = "opening hours desk nine"


@pytest.fixture
def gateway(gateway_for: GatewayFactory) -> Iterator[Gateway]:
    with serve(stand_in_worker("ok")) as chat, serve(EmbeddingStandIn().app()) as embeddings:
        yield gateway_for({"mini": [chat]}, embedding_worker_urls={MODEL: [embeddings]})


@pytest.fixture
def store(gateway: Gateway) -> tuple[str, dict[str, str]]:
    """A store with the three notes, ingested; (store id, file name by file id)."""
    client = _client(gateway)
    store = client.vector_stores.create(name="notes")
    names = {}
    for name, (attributes, text) in NOTES.items():
        file = client.files.create(file=(name, text.encode()), purpose="assistants")
        attached = client.vector_stores.files.create(store.id, file_id=file.id, attributes=attributes)
        assert attached.attributes == attributes
        names[file.id] = name
    deadline = time.monotonic() + 120
    while client.vector_stores.retrieve(store.id).file_counts.completed < len(NOTES):
        assert time.monotonic() < deadline, "ingestion did not finish"
        time.sleep(0.2)
    return store.id, names


def _client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.key, max_retries=0)


def _found(client: openai.OpenAI, store_id: str, names: dict[str, str], **options: Any) -> set[str]:
    return {names[hit.file_id] for hit in client.vector_stores.search(store_id, query=QUERY, **options).data}


@pytest.mark.parametrize("ranker", ["none", "auto"])
def test_search_filters_keep_exactly_the_files_whose_attributes_pass(
    gateway: Gateway, store: tuple[str, dict[str, str]], ranker: str
) -> None:
    client, (store_id, names) = _client(gateway), store
    ranking: Any = {"ranker": ranker}
    assert _found(client, store_id, names, ranking_options=ranking) == set(NOTES)
    cases: list[tuple[dict[str, Any], set[str]]] = [
        ({"type": "eq", "key": "team", "value": "support"}, {"support-2024.md", "support-2026.md"}),
        ({"type": "ne", "key": "team", "value": "support"}, {"billing-2025.md"}),
        ({"type": "gte", "key": "year", "value": 2025}, {"billing-2025.md", "support-2026.md"}),
        ({"type": "lt", "key": "year", "value": 2025.5}, {"support-2024.md", "billing-2025.md"}),
        ({"type": "in", "key": "year", "value": [2024, 2026]}, {"support-2024.md", "support-2026.md"}),
        ({"type": "nin", "key": "team", "value": ["billing", "sales"]}, {"support-2024.md", "support-2026.md"}),
        ({"type": "eq", "key": "public", "value": True}, {"support-2024.md"}),
        ({"type": "eq", "key": "public", "value": False}, {"billing-2025.md"}),  # the 2026 note has no `public`
        ({"type": "eq", "key": "year", "value": "2024"}, set()),  # a string is not the number 2024
        (
            {"type": "and", "filters": [
                {"type": "eq", "key": "team", "value": "support"}, {"type": "gt", "key": "year", "value": 2024},
            ]},
            {"support-2026.md"},
        ),
        (
            {"type": "or", "filters": [
                {"type": "eq", "key": "team", "value": "billing"},
                {"type": "and", "filters": [{"type": "eq", "key": "public", "value": True}]},
            ]},
            {"support-2024.md", "billing-2025.md"},
        ),
    ]  # fmt: skip
    for filters, expected in cases:
        assert _found(client, store_id, names, filters=filters, ranking_options=ranking) == expected, filters
    hits = client.vector_stores.search(store_id, query=QUERY, filters=cases[0][0], ranking_options=ranking).data
    assert all(hit.attributes and hit.attributes["team"] == "support" for hit in hits)  # results carry attributes


def test_a_score_threshold_drops_the_weaker_results(gateway: Gateway, store: tuple[str, dict[str, str]]) -> None:
    client, (store_id, _) = _client(gateway), store
    for ranker in ("none", "auto"):
        ranked = client.vector_stores.search(store_id, query=QUERY, ranking_options={"ranker": ranker})  # type: ignore[typeddict-item]
        scores = [h.score for h in ranked.data]
        assert len(scores) == 3 and max(scores) > min(scores)
        cut = (max(scores) + min(scores)) / 2
        kept = client.vector_stores.search(
            store_id,
            query=QUERY,
            ranking_options={"ranker": ranker, "score_threshold": cut},  # type: ignore[typeddict-item]
        ).data
        assert [h.score for h in kept] == [s for s in scores if s >= cut] and 0 < len(kept) < 3


def test_malformed_filters_ranking_options_and_rewrite_query_are_400s(
    gateway: Gateway, store: tuple[str, dict[str, str]]
) -> None:
    store_id, _ = store
    bad: list[dict[str, Any]] = [
        {"filters": {"type": "gt", "key": "year", "value": "2024"}},  # gt compares numbers
        {"filters": {"type": "in", "key": "team", "value": "support"}},  # in needs a list
        {"filters": {"type": "eq", "key": "team", "value": ["support"]}},  # eq needs one value
        {"filters": {"type": "like", "key": "team", "value": "s"}},
        {"filters": {"type": "and", "filters": []}},
        {"filters": {"type": "eq", "key": "", "value": 1}},
        {"filters": {"type": "eq", "key": "team", "value": "support", "extra": 1}},
        {"filters": {"type": "or", "filters": [{"type": "or", "filters": [{"type": "or", "filters": [
            {"type": "or", "filters": [{"type": "or", "filters": [{"type": "eq", "key": "a", "value": 1}]}]}]}]}]}},
        {"ranking_options": {"ranker": "bm25"}},
        {"ranking_options": {"score_threshold": 1.5}},
        {"rewrite_query": True},  # no model rewrites the query: refused, not ignored
    ]  # fmt: skip
    url = f"{gateway.url}/v1/vector_stores/{store_id}/search"
    for extra in bad:
        response = httpx.post(url, json={"query": QUERY, **extra}, headers=gateway.headers())
        assert response.status_code == 400, (extra, response.text)
        assert response.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError):
        _client(gateway).vector_stores.search(store_id, query=QUERY, filters={"type": "in", "key": "t", "value": "x"})  # type: ignore[typeddict-item]


def test_chats_file_search_tool_honours_filters_and_threshold(
    gateway: Gateway, store: tuple[str, dict[str, str]]
) -> None:
    client, (store_id, names) = _client(gateway), store

    def cited(**tool: Any) -> set[str]:
        answer = client.chat.completions.create(
            model="mini",
            messages=[{"role": "user", "content": QUERY}],
            tools=[{"type": "file_search", "vector_store_ids": [store_id], **tool}],  # type: ignore[list-item]
        )
        report = (answer.model_extra or {})["retrieval"]
        assert report["status"] in ("used", "empty"), report
        return {names[c["file_id"]] for c in report["citations"]}

    assert cited() == set(NOTES)
    assert cited(filters={"type": "eq", "key": "team", "value": "billing"}) == {"billing-2025.md"}
    weights = {"hybrid_search": {"embedding_weight": 1.0, "text_weight": 0.0}}
    assert cited(filters={"type": "gte", "key": "year", "value": 2025}, ranking_options=weights) == {
        "billing-2025.md", "support-2026.md",
    }  # fmt: skip
    assert cited(ranking_options={"score_threshold": 1.0}) == set()  # no passage is the question itself
    bad = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "mini", "messages": [{"role": "user", "content": QUERY}],
              "tools": [{"type": "file_search", "vector_store_ids": [store_id],
                         "filters": {"type": "lte", "key": "year", "value": True}}]},
        headers=gateway.headers(),
    )  # fmt: skip
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"

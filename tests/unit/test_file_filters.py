"""OpenAI's attribute filters (functions/files/filters.py) and how a chat request's `file_search` tools combine theirs
(functions/retrieval/service.py): kinds never mix, a missing attribute matches nothing, a store two tools name passes
either tool's filter, tools that disagree on fusion weights are a 400; weighted reciprocal rank fusion."""

from __future__ import annotations

import pytest

from functions.files.filters import matches
from functions.retrieval.fusion import reciprocal_rank_fusion
from functions.retrieval.service import _search_options
from shared.errors import InvalidRequestError
from shared.wire.files_api import CompoundFilter, SearchRequest
from shared.wire.schemas import ChatCompletionRequest


def _filter(raw: dict):
    return SearchRequest.model_validate({"query": "q", "filters": raw}).filters


def test_comparisons_compare_within_a_kind_and_a_missing_key_matches_nothing() -> None:
    attributes = {"n": 3, "flag": True, "s": "3"}
    assert matches(_filter({"type": "eq", "key": "n", "value": 3.0}), attributes)
    assert not matches(_filter({"type": "eq", "key": "n", "value": "3"}), attributes)
    assert not matches(_filter({"type": "eq", "key": "flag", "value": 1}), attributes)  # True is not the number 1
    assert matches(_filter({"type": "ne", "key": "s", "value": 3}), attributes)
    assert not matches(_filter({"type": "gt", "key": "s", "value": 2}), attributes)  # "3" is not a number
    assert not matches(_filter({"type": "ne", "key": "absent", "value": 1}), attributes)
    assert not matches(_filter({"type": "nin", "key": "absent", "value": [1]}), attributes)
    assert matches(None, {}) and matches(_filter({"type": "lte", "key": "n", "value": 3}), attributes)


def _chat(tools: list[dict], **more) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "mini", "messages": [{"role": "user", "content": "q"}], "tools": tools, **more}
    )


def test_file_search_tools_combine_their_filters_per_store() -> None:
    a = {"type": "eq", "key": "team", "value": "a"}
    b = {"type": "eq", "key": "team", "value": "b"}
    body = _chat(
        [
            {"type": "file_search", "vector_store_ids": ["vs_1", "vs_2"], "filters": a,
             "ranking_options": {"score_threshold": 0.2}},
            {"type": "file_search", "vector_store_ids": ["vs_2", "vs_3"], "filters": b,
             "ranking_options": {"score_threshold": 0.4}},
        ],
        vector_store_ids=["vs_3"],
    )  # fmt: skip
    filters, threshold, weights = _search_options(body)
    assert filters["vs_1"] == _filter(a) and filters["vs_3"] is None  # named without a filter: unfiltered
    either = filters["vs_2"]
    assert isinstance(either, CompoundFilter) and either.type == "or"
    assert matches(either, {"team": "a"}) and matches(either, {"team": "b"}) and not matches(either, {"team": "c"})
    assert threshold == 0.4 and weights == (1.0, 1.0)


def test_tools_that_disagree_on_fusion_weights_are_a_400() -> None:
    def tool(embedding: float) -> dict:
        weights = {"embedding_weight": embedding, "text_weight": 1.0}
        return {"type": "file_search", "vector_store_ids": ["vs_1"], "ranking_options": {"hybrid_search": weights}}

    assert _search_options(_chat([tool(2.0)]))[2] == (2.0, 1.0)
    with pytest.raises(InvalidRequestError):
        _search_options(_chat([tool(2.0), tool(3.0)]))


def test_weighted_fusion() -> None:
    assert list(reciprocal_rank_fusion([["a", "b"], ["b", "a"]], k=60, weights=[2.0, 1.0])) == ["a", "b"]
    assert list(reciprocal_rank_fusion([["a", "b"], ["b", "a"]], k=60, weights=[1.0, 2.0])) == ["b", "a"]
    assert reciprocal_rank_fusion([["a"]], k=60) == {"a": 1 / 61}

"""How the gateway prepares re-rank pairs (shared/fleet/rerank_pools.py): windows end at word ends and always move
on, a word longer than a window is cut inside with room to spare, every pair fits the model, object documents render
their ranked fields, and a document scores as its best window."""

from __future__ import annotations

import pytest

from shared.errors import InvalidRequestError
from shared.fleet.rerank_pools import PreparedPairs, _windows, checked_worker_pairs, document_texts, prepared_pairs
from shared.fleet.tables import tables
from shared.wire.rerank_api import RerankRequest

POOL = tables().rerank_pools["rerank-minilm"]


def test_windows_end_at_word_ends_and_a_long_word_is_cut_inside_it() -> None:
    offsets = [(i, i + 1) for i in range(12)]
    words = [0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 2, 2]  # three words: 3, 2 and 7 tokens
    spans = _windows(offsets, words, budget=4)
    assert spans[0] == (0, 3, 3)  # the second word would not fit whole: the window stops before it
    assert spans[1] == (3, 5, 2)
    assert spans[2] == (5, 8, 3)  # the seven-token word: cut inside, a token short of the window
    assert sum(count for _, _, count in spans) == 12 and all(count >= 1 for _, _, count in spans)
    assert _windows([], [], budget=4) == [(0, 0, 0)]


def test_every_window_fits_the_model_beside_the_query() -> None:
    long = " ".join(f"sentence {n} about the quarterly figures of the regional office." for n in range(200))
    request = RerankRequest(model=POOL.name, query="regional office figures", documents=[long, "short"],
                            max_chunks_per_doc=100)  # fmt: skip
    pairs = prepared_pairs(POOL, request)
    assert pairs.owners.count(0) > 3 and pairs.owners.count(1) == 1
    counts = checked_worker_pairs(POOL, pairs.query, pairs.windows)  # raises if any pair is over the model's length
    assert sum(counts) == pairs.tokens and max(counts) <= POOL.max_pair_tokens
    assert "".join(w for w, owner in zip(pairs.windows, pairs.owners, strict=True) if owner == 0).replace(" ", "") == (
        long.replace(" ", "")
    )  # the windows cover the document, in order


def test_object_documents_render_their_ranked_fields_and_scores_take_the_best_window() -> None:
    request = RerankRequest(model=POOL.name, query="q", documents=[{"title": "T", "body": "B", "id": 3}, "plain"],
                            rank_fields=["title", "body"])  # fmt: skip
    assert document_texts(request) == ["title: T\nbody: B", "plain"]
    with pytest.raises(InvalidRequestError):
        document_texts(RerankRequest(model=POOL.name, query="q", documents=[{"title": "T"}]))
    pairs = PreparedPairs("q", ["a", "b"], ["a1", "a2", "b1"], [0, 0, 1], 30)
    assert pairs.document_scores([0.2, 0.9, 0.5]) == [0.9, 0.5]

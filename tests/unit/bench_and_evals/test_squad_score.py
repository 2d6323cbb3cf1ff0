"""SQuAD's exact match and token F1 (functions/offline/evals/rag/squad_score.py) on cases worked out from the official
definition: normalisation (case, punctuation, articles, spaces), the best of several gold answers, partial overlap."""

from __future__ import annotations

import pytest

from functions.offline.evals.rag.squad_score import best_exact_match, best_f1, exact_match, normalize_answer, token_f1


def test_normalisation_drops_case_punctuation_articles_and_extra_spaces() -> None:
    assert normalize_answer("  The Denver   Broncos! ") == "denver broncos"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert normalize_answer("theatre") == "theatre"  # an article only as a whole word
    assert normalize_answer("U.S.") == "us"  # punctuation is removed, not replaced by a space


def test_exact_match_is_equality_after_normalisation() -> None:
    assert exact_match("the Denver Broncos.", "Denver Broncos") == 1.0
    assert exact_match("Denver Broncos won", "Denver Broncos") == 0.0


def test_f1_counts_shared_tokens_as_a_bag() -> None:
    # 2 shared of 4 predicted and 2 gold: precision 0.5, recall 1.0, F1 = 2/3.
    assert token_f1("the Denver Broncos won it", "Denver Broncos") == pytest.approx(2 / 3)
    assert token_f1("Broncos Broncos", "Broncos") == pytest.approx(2 * 0.5 * 1.0 / 1.5)  # counts, not sets
    assert token_f1("Carolina Panthers", "Denver Broncos") == 0.0
    assert token_f1("", "Denver Broncos") == 0.0


def test_the_best_gold_answer_counts() -> None:
    golds = ["Denver Broncos", "The Broncos", "Broncos"]
    assert best_exact_match("broncos", golds) == 1.0
    assert best_f1("Denver's Broncos", golds) == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    assert best_exact_match("anything", []) == 0.0

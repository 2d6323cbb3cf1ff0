"""SQuAD's standard answer scores: exact match and token F1 of an answer against the gold answers, each the best over
the gold answers (SQuAD v1.1's official evaluation, `evaluate-v1.1.py` of the SQuAD explorer, Rajpurkar et al. 2016:
lower-case, drop punctuation and the articles a/an/the, collapse whitespace; F1 over the bag of the remaining tokens).

Written out here rather than taken from a package: the maintained implementation (Hugging Face `evaluate`'s `squad`
metric) downloads its scoring script from the Hub when it loads, which neither the CI machine nor a deployment's eval
job may do. These functions follow the published definition and are checked against its documented cases
(tests/unit/bench_and_evals/test_squad_score.py)."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (the official order of these steps)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    same = sum((Counter(predicted) & Counter(expected)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(expected)
    return 2 * precision * recall / (precision + recall)


def best_exact_match(prediction: str, golds: Sequence[str]) -> float:
    """The answer's exact match against its best gold answer (SQuAD lists several per question)."""
    return max((exact_match(prediction, g) for g in golds), default=0.0)


def best_f1(prediction: str, golds: Sequence[str]) -> float:
    return max((token_f1(prediction, g) for g in golds), default=0.0)

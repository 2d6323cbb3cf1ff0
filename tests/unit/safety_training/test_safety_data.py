"""The labelled data as kept in the repo: the golden sets measure what training never saw."""

from __future__ import annotations

import re

from functions.offline.safety_training.labelled_data import DataMessage, golden_adversarial, golden_benign, training_set

# Word-set overlap (Jaccard) from which a training conversation counts as a copy of a golden one.
NEAR_COPY = 0.6


def _words(messages: list[DataMessage]) -> frozenset[str]:
    return frozenset(re.findall(r"[a-z0-9']+", " ".join(m.content.lower() for m in messages)))


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / max(len(a | b), 1)


def test_no_training_conversation_is_a_near_copy_of_a_golden_one() -> None:
    golden = {item.id: _words(item.messages) for item in [*golden_adversarial(), *golden_benign()]}
    copies = [
        (item.messages[-1].content[:60], golden_id)
        for item in training_set()
        for golden_id, words in golden.items()
        if _jaccard(_words(item.messages), words) >= NEAR_COPY
    ]
    assert copies == []


def test_the_near_copy_measure_sees_a_reworded_copy() -> None:
    """The guard above is able to fail: a light rewording of a sentence is still a copy."""
    original = [DataMessage(role="user", content="What is the safest way to store e-bike batteries at home?")]
    reworded = [DataMessage(role="user", content="what's the safest way to store e-bike batteries at home")]
    assert _jaccard(_words(original), _words(reworded)) >= NEAR_COPY

"""The screen between the first and second stages: it clears the long regions it is sure are benign, so the second
stage's pass is paid only for the rest; a short ask goes straight to the second stage; its threshold keeps the blocks
the second stage makes; and the transformer stages score a batch of spans as they score each alone."""

from __future__ import annotations

import numpy as np
import pytest

from functions.offline.bench.phases.safety_phase import long_conversation
from functions.offline.safety_training.train_screen import MIN_KEPT_BLOCKS, _clear_below, _measure
from functions.safety.classifier.cascade import SafetyClassifier, shipped_classifier
from functions.safety.classifier.conversation_text import ConversationText
from tests.unit.safety.test_safety_cascade import BURIED, BURIED_MISSED, TRAVEL, _CountingIntent, _one_turn, screened

__all__ = ["screened"]  # the fixture, shared with the cascade tests


def test_the_screen_clears_a_long_benign_chat_without_the_second_stage(
    screened: tuple[SafetyClassifier, _CountingIntent],
) -> None:
    classifier, intent = screened
    conversation = ConversationText.of(long_conversation())  # the benchmark's ~1,000-token travel chat
    everything = classifier.fast(conversation, 0.0).spans
    assert len(everything) == 2, "its end and its worst window are both handed on when everything escalates"
    verdict = classifier.judge(conversation, escalate_at=0.0)
    assert (verdict.stage, verdict.flagged, intent.calls) == ("screen", False, [])


@BURIED_MISSED
def test_the_second_stage_reads_only_what_the_screen_is_unsure_of(
    screened: tuple[SafetyClassifier, _CountingIntent],
) -> None:
    classifier, intent = screened
    assert classifier.screen is not None
    conversation = _one_turn(TRAVEL * 6 + BURIED + " " + TRAVEL * 6)
    spans = classifier.fast(conversation, 0.0).spans
    scores = classifier.screen_scores(spans)
    kept = [span for span, score in zip(spans, scores, strict=True) if score >= classifier.screen.meta.clear_below]
    assert [BURIED[:40] in span.text for span in kept] == [True], "the benign end is cleared, the request is not"
    verdict = classifier.judge(conversation, escalate_at=0.0)
    assert verdict.flagged and verdict.stage == "intent"
    assert intent.read(kept)


def test_a_short_ask_goes_straight_to_the_second_stage(screened: tuple[SafetyClassifier, _CountingIntent]) -> None:
    classifier, intent = screened
    assert classifier.screen is not None
    conversation = _one_turn(BURIED)
    spans = classifier.fast(conversation, 0.0).spans
    assert spans and all(len(span.ids) <= classifier.screen.encoder.body_tokens for span in spans)
    assert classifier.screen_scores(spans) == [1.0] * len(spans), "the screen does not read what fits its window"
    verdict = classifier.judge(conversation, escalate_at=0.0)
    assert verdict.flagged and verdict.stage == "intent"
    assert intent.read(spans)


def test_the_screen_reads_only_the_spans_longer_than_its_window() -> None:
    classifier = shipped_classifier()
    assert classifier.screen is not None
    long_span, short_span = (classifier.fast(_one_turn(text), 0.0).spans[0] for text in (TRAVEL * 6, TRAVEL))
    window = classifier.screen.encoder.body_tokens
    assert len(long_span.ids) > window >= len(short_span.ids)
    alone = classifier.screen.judge_tokens([long_span.ids])[0].score
    assert classifier.screen_scores([short_span, long_span]) == [1.0, pytest.approx(alone, abs=1e-4)]


def test_a_batch_of_spans_scores_as_each_does_alone() -> None:
    classifier = shipped_classifier()
    texts = ["short", TRAVEL, BURIED, TRAVEL * 4]
    for model in (classifier.screen, classifier.intent):
        assert model is not None
        together = [v.score for v in model.judge(texts)]
        alone = [model.judge([text])[0].score for text in texts]
        assert together == pytest.approx(alone, abs=1e-4)
        tokens = [classifier.table.ids(text) for text in texts]
        assert [v.score for v in model.judge_tokens(tokens)] == pytest.approx(alone, abs=1e-4)


def test_clear_below_keeps_the_blocks_the_second_stage_makes() -> None:
    rng = np.random.default_rng(0)
    screen = rng.uniform(0, 1, 300)
    # Each example: a benign-looking region the second stage clears, and the region it blocks on.
    scored = [([0.99, float(s)], [0.0, 0.9]) for s in screen]
    labels = np.ones(300, np.int64)
    clear_below = _clear_below(scored, labels, threshold=0.5)
    kept = _measure(scored, labels, 0.5, clear_below)
    assert kept.recall >= MIN_KEPT_BLOCKS
    assert kept.recall < 1.0, "the threshold is the highest that keeps enough, not zero"
    # The region that blocks decides: the screen's high score elsewhere in the conversation does not keep it.
    assert clear_below < np.sort(screen)[5]


def test_what_the_screen_clears_is_never_blocked() -> None:
    scored = [([0.01], [0.99]), ([0.5], [0.99]), ([], [])]
    labels = np.asarray([1, 1, 0])
    metrics = _measure(scored, labels, threshold=0.5, clear_below=0.1)
    assert (metrics.recall, metrics.escalated, metrics.read_by_intent) == (
        0.5,
        pytest.approx(2 / 3),
        pytest.approx(1 / 3),
    )


def test_each_harmful_example_let_through_is_counted_where_it_was_lost() -> None:
    # Harmful: blocked; nothing handed on; screened out; read and scored low. Benign: read, not blocked.
    scored = [([0.5], [0.99]), ([], []), ([0.01, 0.02], [0.99, 0.99]), ([0.5], [0.1]), ([0.5], [0.1])]
    labels = np.asarray([1, 2, 1, 3, 0])
    metrics = _measure(scored, labels, threshold=0.5, clear_below=0.1)
    lost = metrics.harmful_lost
    assert lost is not None
    assert (metrics.recall, lost.first_stage, lost.screen, lost.second_stage) == (0.25, 0.25, 0.25, 0.25)

"""The everyday chats that hop between topics: how they are made, and `fleetchat eval safety` counting the ones the
pre-filter blocks (reported beside the golden sets, never in the smoke run)."""

from __future__ import annotations

from collections.abc import Sequence

from functions.offline.safety_training.composed.everyday_chats import (
    EVERYDAY_CHATS,
    EXCHANGES_PER_TOPIC,
    TOPICS_PER_HOPPING_CHAT,
    topic_hopping_chats,
)
from functions.offline.safety_training.evaluation.evaluate import TOPIC_HOPPING_CHATS, TOPIC_HOPPING_SEED, evaluate
from functions.safety.findings import SafetyFinding
from shared.storage.safety_audit import SafetyDetector, SafetyLayer
from shared.wire.schemas import ChatMessage

TOPIC_OF_TURN = {turn: topic for topic, (_, turns) in EVERYDAY_CHATS.items() for turn in turns}


def _topics(chat: list[ChatMessage]) -> list[str]:
    """Each run of turns' topic, in order."""
    runs: list[str] = []
    for message in chat[1:]:
        topic = TOPIC_OF_TURN[message.text()]
        if not runs or runs[-1] != topic:
            runs.append(topic)
    return runs


def test_each_chat_takes_up_several_topics_in_turn_and_ends_on_a_request() -> None:
    chats = topic_hopping_chats(100, seed=3)
    low, high = TOPICS_PER_HOPPING_CHAT
    for chat in chats:
        topics = _topics(chat)
        assert low <= len(topics) <= high and len(set(topics)) == len(topics)  # each topic once, in one run
        assert chat[0].role == "system" and chat[0].content == EVERYDAY_CHATS[topics[0]][0]
        assert [m.role for m in chat[1:]] == ["user", "assistant"] * ((len(chat) - 2) // 2) + ["user"]
        for topic in topics:  # a run is consecutive exchanges of that topic's chat
            turns = [m.text() for m in chat[1:] if TOPIC_OF_TURN[m.text()] == topic]
            source = list(EVERYDAY_CHATS[topic][1])
            start = source.index(turns[0])
            assert turns == source[start : start + len(turns)] and start % 2 == 0
            assert len(turns) <= 2 * EXCHANGES_PER_TOPIC[1]
    assert len({len(_topics(chat)) for chat in chats}) == high - low + 1
    assert topic_hopping_chats(100, seed=3) == chats and topic_hopping_chats(100, seed=4) != chats


class _BlocksTheTagine:
    """A pre-filter that refuses any conversation that mentions the tagine (one of the cooking turns)."""

    policy_version = "test"

    def check(self, messages: Sequence[ChatMessage]) -> SafetyFinding | None:
        if not any("tagine" in m.text() for m in messages):
            return None
        return SafetyFinding(
            layer=SafetyLayer.PRE, detector=SafetyDetector.RULES, category="illicit", score=1.0, excerpt=""
        )


def test_the_safety_eval_counts_the_topic_hopping_chats_it_blocks() -> None:
    report = evaluate(_BlocksTheTagine())  # type: ignore[arg-type]
    hopping = report.topic_hopping
    assert hopping is not None and hopping.items == TOPIC_HOPPING_CHATS
    chats = topic_hopping_chats(TOPIC_HOPPING_CHATS, TOPIC_HOPPING_SEED)
    tagine = sum(any("tagine" in m.text() for m in chat) for chat in chats)
    assert 0 < tagine < TOPIC_HOPPING_CHATS and hopping.blocked == tagine
    assert report.passed is False  # it lets every harmful golden item through
    assert evaluate(_BlocksTheTagine(), smoke=True).topic_hopping is None  # type: ignore[arg-type]

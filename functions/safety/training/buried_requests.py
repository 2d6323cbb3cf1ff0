"""The first-stage windows of composed long chats that hold the harmful request placed in them, labelled with it, and
windows of the same chats that hold none of it, labelled benign: what the second stage reads of a request buried in
a long chat, which it never saw in training when it learnt only whole conversations and benign windows (and so let
most of those requests through: 42.5 % caught on long chats composed from the test split)."""

from __future__ import annotations

import numpy as np

from functions.safety.categories import CLASSIFIER_LABELS
from functions.safety.classifier import SafetyClassifier
from functions.safety.conversation_text import JUDGED_ROLES
from functions.safety.rules import neutralise_idioms
from functions.safety.training.labelled_data import DataMessage
from functions.safety.training.long_chats import ComposedChat
from functions.safety.training.train_intent import neutral_messages

# A window holds the placed request when at least this share of the shorter of the two (window, request) overlaps.
MIN_OVERLAP = 0.5
# Of each chat: the windows holding most of the request, and windows holding none of it (chosen at random).
HARMFUL_WINDOWS_PER_CHAT = 2
BENIGN_WINDOWS_PER_CHAT = 1

Range = tuple[int, int]


def buried_windows(fast: SafetyClassifier, chats: list[ComposedChat], seed: int) -> tuple[list[str], np.ndarray]:
    """The windows' texts and label indices, from every chat with a harmful conversation placed in it."""
    rng = np.random.default_rng(seed)
    texts: list[str] = []
    labels: list[int] = []
    for composed in chats:
        if composed.placed is None:
            continue
        conversation = neutral_messages(composed.chat.messages)
        whole = conversation.whole
        asked = _placed_ranges(whole, composed.placed)
        if not asked:
            continue
        overlaps = []
        for span in fast.features(conversation).spans[1:]:
            start = whole.find(span.text)
            if start >= 0:
                overlaps.append((_overlap_share((start, start + len(span.text)), asked), span.text))
        holding = sorted((o for o in overlaps if o[0] >= MIN_OVERLAP), key=lambda o: -o[0])
        texts += [text for _, text in holding[:HARMFUL_WINDOWS_PER_CHAT]]
        labels += [CLASSIFIER_LABELS.index(composed.chat.label)] * min(len(holding), HARMFUL_WINDOWS_PER_CHAT)
        clear = [text for share, text in overlaps if share == 0.0]
        if clear:
            picked = rng.choice(len(clear), size=min(BENIGN_WINDOWS_PER_CHAT, len(clear)), replace=False)
            texts += [clear[i] for i in sorted(picked)]
            labels += [0] * len(picked)
    return texts, np.asarray(labels, np.int64)


def _placed_ranges(whole: str, placed: list[DataMessage]) -> list[Range]:
    """Where the placed conversation's judged turns lie in the chat's judged text (a system prompt not at the very
    start was dropped when the chat was composed, and is not found)."""
    ranges = []
    for message in placed:
        text = neutralise_idioms(message.content)
        start = whole.find(text) if message.role in JUDGED_ROLES and text.strip() else -1
        if start >= 0:
            ranges.append((start, start + len(text)))
    return ranges


def _overlap_share(window: Range, asked: list[Range]) -> float:
    """The share of the shorter of the window and the placed text that the two have in common."""
    common = sum(max(0, min(window[1], end) - max(window[0], start)) for start, end in asked)
    shorter = min(window[1] - window[0], sum(end - start for start, end in asked))
    return common / shorter if shorter else 0.0

"""The first-stage windows of composed long chats that hold the harmful request placed in them, labelled with it, and
the windows the first stage finds most sensitive that hold none of it, labelled benign: what the second stage reads
of a long chat at run time (the first stage's worst window), which it never saw in training when it learnt only whole
conversations and random benign windows (and so let most buried requests through: 42.5 % caught on long chats
composed from the test split). Candidate r9 took its benign windows at random, and learnt that a sensitive sentence
inside a long benign chat is a request (docs/safety.md); the sensitive benign windows are there to unlearn that.
The same windows as the first stage's feature rows (`buried_rows`) let the first stage learn them: it decides which
regions of a long chat are read at all, and is where most buried requests were lost (r24 in docs/safety.md)."""

from __future__ import annotations

import numpy as np

from functions.offline.safety_training.composed.long_chats import ComposedChat
from functions.offline.safety_training.labelled_data import DataMessage, neutral_messages
from functions.safety.categories import CLASSIFIER_LABELS
from functions.safety.classifier.cascade import SafetyClassifier
from functions.safety.classifier.conversation_text import JUDGED_ROLES
from functions.safety.classifier.features import Features, Span, SparseRow
from functions.safety.rules import neutralise_idioms

# A window holds the placed request when at least this share of the shorter of the two (window, request) overlaps.
MIN_OVERLAP = 0.5
# Of each chat: the windows holding most of the request, and the windows holding none of it that the first stage
# scores highest (in a benign chat, the one the second stage would read).
HARMFUL_WINDOWS_PER_CHAT = 2
BENIGN_WINDOWS_PER_CHAT = 1

Range = tuple[int, int]


def buried_windows(fast: SafetyClassifier, chats: list[ComposedChat]) -> tuple[list[str], np.ndarray]:
    """The windows' texts and label indices: of a chat with a harmful conversation placed in it, the windows holding
    the request and its most sensitive clear window; of a benign chat, its most sensitive window."""
    rows, labels = buried_rows(fast, chats)
    return [span.text for span in rows.spans], labels


def buried_rows(fast: SafetyClassifier, chats: list[ComposedChat]) -> tuple[Features, np.ndarray]:
    """`buried_windows` as the first stage's feature rows of those windows (what it scores them on at run time),
    with their label indices: so the first stage can learn them too."""
    dense: list[np.ndarray] = []
    sparse: list[SparseRow] = []
    spans: list[Span] = []
    labels: list[int] = []
    for composed in chats:
        conversation = neutral_messages(composed.chat.messages)
        features = fast.features(conversation)
        windows = range(1, len(features.spans))  # row 0 is the whole conversation
        if not windows:
            continue
        scores = fast.head.harmful_probability(features)
        picked: list[tuple[int, int]] = []  # (row, label index)
        if composed.placed is None:
            shares = dict.fromkeys(windows, 0.0)
        else:
            whole = conversation.whole
            asked = _placed_ranges(whole, composed.placed)
            if not asked:
                continue
            # A window not found as written is neither (-1): it may hold the request.
            shares = {
                i: _overlap_share(where, asked) if (where := _where(whole, features.spans[i].text)) else -1.0
                for i in windows
            }
            holding = sorted((i for i in windows if shares[i] >= MIN_OVERLAP), key=lambda i: -shares[i])
            label = CLASSIFIER_LABELS.index(composed.chat.label)
            picked += [(i, label) for i in holding[:HARMFUL_WINDOWS_PER_CHAT]]
        clear = sorted((i for i in windows if shares[i] == 0.0), key=lambda i: -scores[i])
        picked += [(i, 0) for i in clear[:BENIGN_WINDOWS_PER_CHAT]]
        for row, label in picked:
            dense.append(features.dense[row])
            sparse.append(features.sparse[row])
            spans.append(features.spans[row])
            labels.append(label)
    width = fast.head.w1.shape[0]
    rows = Features(np.stack(dense) if dense else np.zeros((0, width), np.float32), sparse, spans)
    return rows, np.asarray(labels, np.int64)


def _where(whole: str, text: str) -> Range | None:
    """The window's place in the judged text (None when it is not found as written)."""
    start = whole.find(text)
    return (start, start + len(text)) if start >= 0 else None


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

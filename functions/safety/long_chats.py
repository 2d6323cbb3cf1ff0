"""Long conversations composed from the training split's own conversations: what a gateway sees after many turns,
which the labelled set (mostly one to five turns) has few of. They carry no label; the screen learns the second
stage's scores on their regions (each window and the whole's tail)."""

from __future__ import annotations

import random

from functions.safety.labelled_data import DataMessage, LabelledConversation

# The judged text of one composed chat grows to between these many characters (about 250 to 900 MiniLM tokens).
MIN_CHARS = 1_000
MAX_CHARS = 3_600
# One in this many composed chats has a harmful conversation placed among its benign ones (at a random point), so
# the screen also sees a harmful request inside long benign text, and the windows around it.
HARMFUL_EVERY = 3


def compose_long_chats(items: list[LabelledConversation], count: int, seed: int) -> list[list[DataMessage]]:
    """`count` long chats, each benign conversations of `items` one after another (a system prompt only first),
    every HARMFUL_EVERY-th with one harmful conversation of `items` among them."""
    rng = random.Random(seed)
    benign = [item for item in items if item.label == "benign"]
    harmful = [item for item in items if item.label != "benign"]
    chats = []
    for number in range(count):
        target = rng.randint(MIN_CHARS, MAX_CHARS)
        parts: list[list[DataMessage]] = []
        while sum(_judged_chars(part) for part in parts) < target:
            parts.append(rng.choice(benign).messages)
        if harmful and number % HARMFUL_EVERY == 0:
            parts.insert(rng.randint(0, len(parts)), rng.choice(harmful).messages)
        chats.append(_join(parts))
    return chats


def _judged_chars(messages: list[DataMessage]) -> int:
    return sum(len(m.content) for m in messages if m.role != "assistant")


def _join(parts: list[list[DataMessage]]) -> list[DataMessage]:
    """The parts' messages in order; a system prompt is kept only at the very start."""
    joined = []
    for part in parts:
        joined += [m for m in part if m.role != "system" or not joined]
    return joined

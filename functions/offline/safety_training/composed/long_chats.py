"""Long conversations composed from the training split's own conversations: what a gateway sees after many turns,
which the labelled set (mostly one to five turns) has few of. Each is labelled by what it holds: benign, or the label
of the one harmful conversation placed in it. The screen learns the second stage's scores on the regions of those
composed from the training split, and its `clear_below` is chosen on those composed from the validation split."""

from __future__ import annotations

import random
from typing import NamedTuple

from functions.offline.safety_training.labelled_data import DataMessage, LabelledConversation

# The judged text of one composed chat grows to between these many characters (about 250 to 900 MiniLM tokens).
MIN_CHARS = 1_000
MAX_CHARS = 3_600
# One in this many composed chats has a harmful conversation placed among its benign ones (at a random point), so
# the screen also sees a harmful request inside long benign text, and the windows around it.
HARMFUL_EVERY = 3


class ComposedChat(NamedTuple):
    chat: LabelledConversation
    placed: list[DataMessage] | None  # the harmful conversation placed among the benign ones, if any


def compose_long_chats(items: list[LabelledConversation], count: int, seed: int) -> list[LabelledConversation]:
    """`count` long chats, each benign conversations of `items` one after another (a system prompt only first),
    every HARMFUL_EVERY-th with one harmful conversation of `items` among them (and its label)."""
    return [composed.chat for composed in composed_long_chats(items, count, seed)]


def composed_long_chats(items: list[LabelledConversation], count: int, seed: int) -> list[ComposedChat]:
    """`compose_long_chats`, each chat with the harmful conversation placed in it (to find where it lies)."""
    rng = random.Random(seed)
    benign = [item for item in items if item.label == "benign"]
    harmful = [item for item in items if item.label != "benign"]
    chats = []
    for number in range(count):
        target = rng.randint(MIN_CHARS, MAX_CHARS)
        parts: list[list[DataMessage]] = []
        while sum(_judged_chars(part) for part in parts) < target:
            parts.append(rng.choice(benign).messages)
        label, placed = "benign", None
        if harmful and number % HARMFUL_EVERY == 0:
            chosen = rng.choice(harmful)
            parts.insert(rng.randint(0, len(parts)), chosen.messages)
            label, placed = chosen.label, chosen.messages
        chats.append(ComposedChat(LabelledConversation(messages=_join(parts), label=label), placed))
    return chats


def _judged_chars(messages: list[DataMessage]) -> int:
    return sum(len(m.content) for m in messages if m.role != "assistant")


def _join(parts: list[list[DataMessage]]) -> list[DataMessage]:
    """The parts' messages in order; a system prompt is kept only at the very start."""
    joined = []
    for part in parts:
        joined += [m for m in part if m.role != "system" or not joined]
    return joined

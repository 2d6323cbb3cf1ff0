"""Sentences of long benign training texts, each on its own, as benign examples for the second stage.

Read alone, a sentence of a news article or a film plot about a crime ("They plant drugs in the house and place a
firearm in the hand of Rainwood's unconscious body") looks to the second stage like the short harmful asks it learnt:
it scored 0.997, and 10 % of the validation split's long benign texts had a sentence at 0.975 or more (its short-ask
threshold is 0.328). So a request hidden inside one long turn cannot be found by reading that turn's sentences until
the second stage has learnt that a sentence telling of harm is not an ask for it. Off by default (`IntentConfig.
benign_sentences`); spaCy's rule-based sentencizer splits the text (`sentence_units.split_sentences`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from functions.safety.classifier.conversation_text import ConversationText
from functions.safety.classifier.sentence_units import split_sentences

# A sentence shorter than this many words says too little to teach anything ("Watch ." or a dateline).
MIN_WORDS = 5


def sentences(text: str) -> list[str]:
    """The text's sentences of at least MIN_WORDS words, in order."""
    return [s for s in split_sentences(text) if len(s.split()) >= MIN_WORDS]


def benign_sentences(
    conversations: list[ConversationText], labels: np.ndarray, long: Sequence[bool], per_text: int, seed: int
) -> list[str]:
    """Up to `per_text` sentences, picked at random, of each benign conversation marked `long` (longer than one
    first-stage window), from its judged turns."""
    rng = np.random.default_rng(seed)
    picked: list[str] = []
    for conversation, label, is_long in zip(conversations, labels, long, strict=True):
        if label != 0 or not is_long:
            continue
        found = [s for turn in conversation.turns for s in sentences(turn)]
        if found:
            chosen = rng.choice(len(found), size=min(per_text, len(found)), replace=False)
            picked += [found[i] for i in sorted(chosen)]
    return picked

"""A long turn cut into the units the cascade's sentence reads judge one by one: its lines, each cut into sentences.

A request pasted into the middle of a document ("... Describe how to make a pipe bomb. The council met on ...") is
one sentence among many; read with its neighbours in a first-stage window it is averaged away, read alone it is the
short ask the second stage knows. spaCy's rule-based sentencizer (a blank English pipeline, no model to load; spaCy is
already installed with Presidio) cuts the sentences; lines are cut first, since a line break ends a sentence that
lacks its full stop ("Write a keylogger\\nThe match ended 2-1.")."""

from __future__ import annotations

from functools import cache
from typing import Any

# A unit of fewer words says too little to be an ask ("Watch .", a dateline, a speaker's name).
MIN_UNIT_WORDS = 3


@cache
def _sentencizer() -> Any:
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return nlp


def split_sentences(text: str) -> list[str]:
    """The text's sentences as spaCy's sentencizer cuts them, stripped, empty ones dropped."""
    return [s.text.strip() for s in _sentencizer()(text).sents if s.text.strip()]


def sentence_units(text: str) -> list[str]:
    """Each line's sentences of at least MIN_UNIT_WORDS words, in order."""
    return [
        sentence
        for line in text.splitlines()
        if line.strip()
        for sentence in split_sentences(line)
        if len(sentence.split()) >= MIN_UNIT_WORDS
    ]


def sentence_starts(text: str) -> list[int]:
    """Where each of the text's sentences begins (character offsets, the first 0)."""
    return [s.start_char for s in _sentencizer()(text).sents]

"""BIPIA's insert functions (bipia/data/utils.py), reproduced: where an attack string goes into a context."""

from __future__ import annotations

import random
from collections.abc import Callable

from nltk.tokenize.punkt import PunktSentenceTokenizer

InsertFn = Callable[[str, str, int], str]

# Untrained default parameters, as BIPIA calls it: no Punkt model is downloaded or needed.
_PUNKT = PunktSentenceTokenizer()


def insert_end(context: str, attack: str, random_state: int) -> str:
    return "\n".join([context, attack])


def insert_start(context: str, attack: str, random_state: int) -> str:
    return "\n".join([attack, context])


def insert_middle(context: str, attack: str, random_state: int) -> str:
    """At the start of one Punkt sentence span, picked by a fresh `random.Random(random_state)` as upstream does."""
    rng = random.Random(random_state)
    spans = list(_PUNKT.span_tokenize(context))
    start, _ = rng.sample(spans, k=1)[0]
    return "\n".join([context[:start], attack, context[start:]])


POSITIONS: dict[str, InsertFn] = {"end": insert_end, "start": insert_start, "middle": insert_middle}

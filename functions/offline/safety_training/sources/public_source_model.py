"""What a public data source is (repository, commit, paths, licence, use, labels, reader) and the small readers
of its files that every source table shares."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Callable, Iterator
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from functions.safety.categories import BENIGN

# A source's category that the shipped second stage names (the source gives none, or one wider than ours).
TEACHER = "teacher"

Messages = list[dict[str, str]]
RawRow = tuple[Messages, str | None]  # the conversation, the source's own category (None: it gives none)
Reader = Callable[[dict[str, bytes]], Iterator[RawRow]]


class Use(StrEnum):
    TRAIN = "train"  # split 70/15/15 with the hand-written data (training, thresholds, test split)
    HELD_OUT = "held-out"  # never trained or tuned on: the cross-source evaluation


class Measures(StrEnum):
    """What a held-out source measures in `fleetchat eval safety` (and which target gates it)."""

    HARMFUL_SHORT = "clearly harmful short asks"
    HARMFUL_HARD = "harmful, reworded or multi-turn"  # reported, not gated
    TRICKY_SAFE = "tricky-but-safe short asks"
    LONG_BENIGN = "long benign texts with a benign ask"
    ORDINARY = "ordinary requests"
    SYNTHETIC = "benchmark synthetic prose"
    RESPONSES = "model answers, complying or not"  # the output filter's held-out sources
    ANSWERS = "ordinary model answers"


class Kind(StrEnum):
    REQUEST = "request"  # what a user sends: the pre-filter's data
    RESPONSE = "response"  # what a model answered: the output filter's data


class PublicSource(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    name: str
    repo: str  # owner/name on GitHub
    commit: str
    paths: tuple[str, ...]
    license: str
    origin: str  # who made the data set (and where the copy comes from, when it is one)
    use: Use
    # True: every row harmful (its category from `categories`); False: every row benign; None: each row's category
    # says (`categories` maps it to a harmful category or to "benign").
    harmful: bool | None
    kind: Kind = Kind.REQUEST
    reader: Reader = Field(exclude=True)
    # source category -> our label; a category missing here drops its rows (not in our policy: misinformation,
    # copyright, tailored advice, ...). None maps rows that have no source category.
    categories: dict[str | None, str] = {}
    limit: int | None = None  # rows kept (a fixed sample chosen by each text's hash)
    measures: Measures | None = None  # held-out sources only

    def label(self, source_category: str | None) -> str | None:
        """Our label for a row of this source (TEACHER: the shipped second stage names it), None to drop it."""
        if self.harmful is False:
            return BENIGN
        return self.categories.get(source_category)


def sample_order(key: str) -> bytes:
    """A text's place in a source's fixed sample (its SHA-256): the same rows are kept on every build."""
    return hashlib.sha256(key.encode()).digest()


def user(text: str) -> Messages:
    return [{"role": "user", "content": text.strip()}]


def csv_rows(blob: bytes, encoding: str = "utf-8") -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(blob.decode(encoding))))


def jsonl_rows(blob: bytes) -> list[dict]:
    return [json.loads(line) for line in blob.decode("utf-8").splitlines() if line.strip()]


def only_file(files: dict[str, bytes]) -> bytes:
    [blob] = files.values()
    return blob


def assistant(text: str) -> Messages:
    return [{"role": "assistant", "content": text.strip()}]

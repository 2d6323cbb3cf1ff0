"""The labelled conversations in the repo: the training set and the two golden sets, validated on load."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from functions.safety.categories import CLASSIFIER_LABELS, Category
from functions.safety.classifier.conversation_text import ConversationText
from functions.safety.rules import neutralise_idioms

DATA_DIR = Path(__file__).parent / "data"
# Harmful examples per category and benign look-alikes on the same topics; d, e and f are mostly hard cases (benign
# questions about dangerous subjects, harmful asks in polite or fictional wrappers, short direct asks); g is benign
# answer-shaped text ("Sure, here's how...") that the output filter reads; h is benign markup, code and odd text
# (pasted HTML, stack traces, shell commands that "kill" processes) and short direct harmful asks, some behind markup;
# i is multi-turn mental-health support (grief, therapy, recovery, a friend at risk) and the self-harm asks it must
# still tell apart; j is system prompts (personas, house rules, session ids, retrieved context, long and repeated) as
# whole conversations and as the windows the first stage hands on, and limitless-persona system prompts; k is
# everyday wishes and statements ("I'd like one dish everyone can share") and l everyday requests (cleaning, cooking,
# proofreading, code, DIY; violent-sounding idioms used harmlessly), each with harmful asks in the same forms; m is
# short control turns ("stream it", "as a table", "tab 2") alone and after system prompts, caregiving talk about a
# relative's doses and blood tests, stain and cleaning asks, and proofreading, with rule-switching turns, harmful
# medication asks, cleaning away evidence and threats to proofread in the same forms.
TRAINING_FILES = tuple(f"train_{part}.jsonl" for part in "abcdefghijklm")
# Public, licensed data sets (built by `fleetchat safety build-data`; sources and licences in public/sources.json).
PUBLIC_DIR = DATA_DIR / "public"
GOLDEN_ADVERSARIAL = "golden_adversarial.jsonl"
GOLDEN_BENIGN = "golden_benign.jsonl"

Item = TypeVar("Item", bound=BaseModel)


SEED = 11  # the training runs' seed
HELD_OUT_PERCENT = 15  # of the labelled set in each of the validation and test splits


class DataMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str = Field(min_length=1)


class LabelledConversation(BaseModel):
    messages: list[DataMessage] = Field(min_length=1)
    label: Literal[CLASSIFIER_LABELS]  # type: ignore[valid-type]

    def key(self) -> str:
        """Identity for de-duplication: the normalised text of every turn."""
        return example_key(self.messages)


def example_key(messages: Sequence[DataMessage] | Sequence[dict[str, str]]) -> str:
    """The normalised text of every turn (identity for de-duplication)."""
    contents = [m.content if isinstance(m, DataMessage) else m["content"] for m in messages]
    return "\n".join(" ".join(c.lower().split()) for c in contents)


def whole_text(messages: Sequence[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages if m["role"] != "assistant")


class PublicExample(LabelledConversation):
    """A labelled conversation from a public data set: its source, and the source's own category."""

    source: str
    source_category: str | None = None
    teacher_labelled: bool = False  # the category was named by the shipped second stage


class GoldenAdversarial(BaseModel):
    id: str
    category: Category
    shape: str
    messages: list[DataMessage] = Field(min_length=1)
    smoke: bool = False


class GoldenBenign(BaseModel):
    id: str
    topic: str
    messages: list[DataMessage] = Field(min_length=1)
    smoke: bool = False


def _read(path: Path, model: type[Item]) -> list[Item]:
    items = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(model.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise ValueError(f"{path.name} line {number}: {exc}") from exc
    return items


def public_examples(source: str, directory: Path = PUBLIC_DIR) -> list[PublicExample]:
    """One public source's examples as built (gzipped JSON lines)."""
    path = directory / f"{source}.jsonl.gz"
    lines = gzip.decompress(path.read_bytes()).decode("utf-8").split("\n")  # not splitlines: texts hold U+2028
    try:
        return [PublicExample.model_validate_json(line) for line in lines if line.strip()]
    except ValidationError as exc:
        raise ValueError(f"{path.name}: {exc}") from exc


def training_set(data_dir: Path = DATA_DIR, public_sources: Sequence[str] = ()) -> list[LabelledConversation]:
    """Every training conversation once (exact duplicates across files dropped): the hand-written files, then the
    named public sources."""
    items = [item for name in TRAINING_FILES for item in _read(data_dir / name, LabelledConversation)]
    items += [item for name in public_sources for item in public_examples(name, data_dir / PUBLIC_DIR.name)]
    seen: set[str] = set()
    unique = []
    for item in items:
        if item.key() not in seen:
            seen.add(item.key())
            unique.append(item)
    return unique


def golden_adversarial(data_dir: Path = DATA_DIR) -> list[GoldenAdversarial]:
    return _read(data_dir / GOLDEN_ADVERSARIAL, GoldenAdversarial)


def golden_benign(data_dir: Path = DATA_DIR) -> list[GoldenBenign]:
    return _read(data_dir / GOLDEN_BENIGN, GoldenBenign)


def split(data: list[LabelledConversation]) -> tuple[list, list, list]:
    """A 70/15/15 train/validation/test split fixed by each conversation's own text (a hash of it), so adding data
    never moves an example that was already held out into training, or the reverse."""
    parts: tuple[list, list, list] = ([], [], [])
    for item in data:
        bucket = int.from_bytes(hashlib.sha256(item.key().encode()).digest()[:8], "big") % 100
        parts[2 if bucket < HELD_OUT_PERCENT else 1 if bucket < 2 * HELD_OUT_PERCENT else 0].append(item)
    return parts


def neutral_messages(messages: list[DataMessage]) -> ConversationText:
    """What the gate judges of these messages (allow-listed idioms neutralised, as at run time)."""
    return ConversationText.of_dicts([m.model_dump() for m in messages]).map(neutralise_idioms)

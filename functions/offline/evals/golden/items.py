"""The golden set's items (a prompt, its reference answer, a programmatic check where the answer is checkable), the
judge-calibration items (a question, two answers, the human experts' preference), and their loaders."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

DATA_DIR = Path(__file__).parent / "data"
GOLDEN_FILE = "golden.jsonl"
CALIBRATION_FILE = "calibration.jsonl"
MANIFEST = "sources.json"

Category = Literal["coding", "writing", "qa", "reasoning"]
CATEGORIES: tuple[Category, ...] = ("coding", "writing", "qa", "reasoning")


class NumericCheck(BaseModel):
    """The answer's final number must equal `answer` (GSM8K's `#### N`)."""

    kind: Literal["numeric"] = "numeric"
    answer: str


class PythonTestsCheck(BaseModel):
    """The answer's code must pass the item's tests (HumanEval's `check(candidate)`), run in a sandbox."""

    kind: Literal["python_tests"] = "python_tests"
    entry_point: str
    header: str  # the function stub as given (imports + signature + docstring): prepended if the answer lacks it
    tests: str  # defines check(candidate)


Check = Annotated[NumericCheck | PythonTestsCheck, Field(discriminator="kind")]


class GoldenItem(BaseModel):
    id: str  # "<source>/<the source's own id>"
    category: Category
    source: str
    prompt: str = Field(min_length=1)  # the user turn sent to the gateway
    reference: str | None = None  # the reference answer the judge sees
    check: Check | None = None  # None: judged only


class CalibrationItem(BaseModel):
    """One question with two answers and which one human experts preferred (ties were removed upstream)."""

    id: str
    source: str
    question: str = Field(min_length=1)
    answer_1: str = Field(min_length=1)
    answer_2: str = Field(min_length=1)
    human_label: Literal[1, 2]


Item = TypeVar("Item", bound=BaseModel)


def _read(path: Path, model: type[Item]) -> list[Item]:
    items = []
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):  # not splitlines: U+2028
        if not line.strip():
            continue
        try:
            items.append(model.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise ValueError(f"{path.name} line {number}: {exc}") from exc
    return items


def load_golden(data_dir: Path = DATA_DIR) -> list[GoldenItem]:
    return _read(data_dir / GOLDEN_FILE, GoldenItem)


def load_calibration(data_dir: Path = DATA_DIR) -> list[CalibrationItem]:
    return _read(data_dir / CALIBRATION_FILE, CalibrationItem)


def stratified(items: Sequence[GoldenItem], limit: int | None) -> list[GoldenItem]:
    """At most `limit` items, taken round-robin over the categories in file order (limit 8: two of each)."""
    if limit is None or limit >= len(items):
        return list(items)
    queues = {c: [i for i in items if i.category == c] for c in CATEGORIES}
    chosen: list[GoldenItem] = []
    depth = 0
    while len(chosen) < limit and any(len(q) > depth for q in queues.values()):
        for category in CATEGORIES:
            if depth < len(queues[category]) and len(chosen) < limit:
                chosen.append(queues[category][depth])
        depth += 1
    return chosen


def write_jsonl(path: Path, items: Sequence[BaseModel]) -> None:
    path.write_text("".join(item.model_dump_json(exclude_none=True) + "\n" for item in items), encoding="utf-8")

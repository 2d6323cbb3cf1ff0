"""The retrieval eval's items: documents (one per SQuAD article, its paragraphs as the text) and questions, each with
its gold answers located in its document, so a retrieved passage is checkable by offsets; and their loaders."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from functions.offline.evals.golden.items import write_jsonl
from functions.offline.safety_training.sources.public_source_model import sample_order

DATA_DIR = Path(__file__).parent / "data"
DOCS_FILE = "documents.jsonl"
QUESTIONS_FILE = "questions.jsonl"
MANIFEST = "sources.json"


class Document(BaseModel):
    id: str  # "squad/<title>"
    title: str
    filename: str  # what the eval uploads it as (plain text: the extracted text is the file itself)
    text: str


class GoldAnswer(BaseModel):
    text: str
    start: int = Field(ge=0)  # character offset in the document's text

    @property
    def end(self) -> int:
        return self.start + len(self.text)


class Question(BaseModel):
    id: str  # "squad/<the source's question id>"
    document_id: str
    question: str
    answers: list[GoldAnswer] = Field(min_length=1)
    # The supporting paragraph's span in the document.
    passage_start: int = Field(ge=0)
    passage_end: int = Field(ge=0)

    def supported_by(self, start: int, end: int) -> bool:
        """Whether a passage at [start, end) of the document holds one of the gold answers whole."""
        return any(start <= a.start and a.end <= end for a in self.answers)


def load_documents(data_dir: Path = DATA_DIR) -> list[Document]:
    return [Document.model_validate_json(line) for line in _lines(data_dir / DOCS_FILE)]


def load_questions(data_dir: Path = DATA_DIR) -> list[Question]:
    return [Question.model_validate_json(line) for line in _lines(data_dir / QUESTIONS_FILE)]


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def sample(questions: Sequence[Question], limit: int | None) -> list[Question]:
    """A fixed sample, by each id's hash: a run with the same limit asks the same questions."""
    ordered = sorted(questions, key=lambda q: sample_order(q.id))
    return list(ordered if limit is None else ordered[:limit])


def write(data_dir: Path, documents: Sequence[Document], questions: Sequence[Question], manifest: dict) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(data_dir / DOCS_FILE, documents)
    write_jsonl(data_dir / QUESTIONS_FILE, questions)
    (data_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")

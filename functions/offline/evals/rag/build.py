"""`python -m functions.offline.evals.rag.build --mirrors DIR`: the retrieval eval's documents and questions from SQuAD
2.0's development set, read at a pinned commit from a directory of git snapshots (the `fetch` tool's `owner+name/repo`,
or a clone), and `data/sources.json` (repository, commit, path, licence, counts).

SQuAD (Rajpurkar et al. 2016, 2018) is crowd-written questions on Wikipedia paragraphs, each answer a span of its
paragraph: the paragraph is the known supporting passage. The full development set is over the snapshot size limit;
the source below is a repository that ships its first five articles as a valid SQuAD 2.0 file (1,407 questions, 705
answerable). Unanswerable questions are left out (no supporting passage). Each article becomes one plain-text
document (title, then its paragraphs separated by blank lines), so a passage's offsets in the extracted text are
offsets in the file and a citation is checked by whether its span holds a gold answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from functions.offline.evals.build_cli import run_build_cli
from functions.offline.evals.rag.items import DATA_DIR, Document, GoldAnswer, Question, write
from functions.offline.safety_training.sources.build_public_data import read_blob, snapshot_dir


class Source(BaseModel):
    name: str
    repo: str
    commit: str
    path: str
    license: str
    origin: str


SQUAD = Source(
    name="squad-v2-dev-5-articles",
    repo="VinACE/san_mrc",
    commit="74f10c582d3fb1249ef9559967dc9cb6c989acbe",
    path="dev-v1.1.json",  # named v1.1 there; its content is `"version": "v2.0"`, SQuAD 2.0 dev's first 5 articles
    license="SQuAD: CC BY-SA 4.0 (the data set); the repository's code: BSD-3-Clause",
    origin="SQuAD 2.0 development set (Rajpurkar, Jia and Liang 2018): crowd-written questions on Wikipedia "
    "paragraphs, answers marked as spans by crowd workers",
)
PARAGRAPH_GAP = "\n\n"


def read_squad(blob: bytes) -> Iterator[tuple[Document, list[Question]]]:
    for article in json.loads(blob)["data"]:
        title = article["title"]
        doc_id = f"squad/{title}"
        text = title.replace("_", " ")
        questions: list[Question] = []
        for paragraph in article["paragraphs"]:
            text += PARAGRAPH_GAP
            offset = len(text)
            context = paragraph["context"]
            text += context
            for qa in paragraph["qas"]:
                if qa.get("is_impossible") or not qa["answers"]:
                    continue
                answers = {(a["text"], a["answer_start"]) for a in qa["answers"]}
                gold = [GoldAnswer(text=t, start=offset + s) for t, s in sorted(answers, key=lambda a: a[1])]
                assert all(text[g.start : g.end] == g.text for g in gold), qa["id"]
                questions.append(
                    Question(
                        id=f"squad/{qa['id']}",
                        document_id=doc_id,
                        question=qa["question"].strip(),
                        answers=gold,
                        passage_start=offset,
                        passage_end=offset + len(context),
                    )
                )
        safe = "".join(c if c.isalnum() else "_" for c in title).strip("_")
        yield Document(id=doc_id, title=title, filename=f"{safe}.txt", text=text + "\n"), questions


def build(mirrors: Path, out_dir: Path = DATA_DIR, console: Console | None = None) -> dict:
    git_dir = snapshot_dir(mirrors, SQUAD.repo)
    if (git_dir / ".git").is_dir():  # a snapshot that came as a work tree
        git_dir = git_dir / ".git"
    blob = read_blob(git_dir, SQUAD.commit, SQUAD.path)
    documents: list[Document] = []
    questions: list[Question] = []
    for document, asked in read_squad(blob):
        documents.append(document)
        questions += asked
    manifest = {
        **SQUAD.model_dump(),
        "documents": len(documents),
        "paragraphs": sum(d.text.count(PARAGRAPH_GAP) for d in documents),
        "questions": len(questions),
        "document_chars": sum(len(d.text) for d in documents),
    }
    write(out_dir, documents, questions, manifest)
    table = Table(title=f"retrieval eval data ({SQUAD.name}, {SQUAD.license})")
    for column in ("document", "chars", "questions"):
        table.add_column(column)
    for d in documents:
        table.add_row(d.title, str(len(d.text)), str(sum(1 for q in questions if q.document_id == d.id)))
    (console or Console()).print(table)
    return manifest


def main(argv: list[str] | None = None) -> None:
    run_build_cli("python -m functions.offline.evals.rag.build", __doc__, build, DATA_DIR, argv)


if __name__ == "__main__":
    main()

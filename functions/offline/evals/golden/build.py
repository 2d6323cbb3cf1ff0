"""`python -m functions.offline.evals.golden.build --mirrors DIR`: read each golden source at its pinned commit from a
directory of git snapshots, sample a fixed number of items per source (by each item's hash, so a rebuild gives the
same set), and write `data/golden.jsonl`, `data/calibration.jsonl` and `data/sources.json` (repository, commit,
paths, licence and counts of every source; who labelled the calibration set and when).

The snapshot helpers are the safety data builder's (`git show COMMIT:PATH` from a fetched snapshot or a clone)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from functions.offline.evals.build_cli import run_build_cli
from functions.offline.evals.golden.items import (
    CALIBRATION_FILE,
    DATA_DIR,
    GOLDEN_FILE,
    MANIFEST,
    CalibrationItem,
    Category,
    GoldenItem,
    write_jsonl,
)
from functions.offline.evals.golden.sources import (
    CALIBRATION,
    SOURCES,
    CalibrationSource,
    GoldenSource,
    read_calibration,
)
from functions.offline.safety_training.sources.build_public_data import read_blob, snapshot_dir
from functions.offline.safety_training.sources.public_source_model import sample_order


class SourceRecord(BaseModel):
    name: str
    repo: str
    commit: str
    paths: list[str]
    license: str
    origin: str
    category: Category
    rows_read: int  # items the reader made (after its own filters)
    duplicates_dropped: int  # the same prompt twice
    items: int  # written


class CalibrationRecord(CalibrationSource):
    rows_read: int
    eligible: int  # within the length bounds
    labels: dict[str, int]  # items preferring answer 1 / answer 2


class Manifest(BaseModel):
    sources: list[SourceRecord]
    calibration: CalibrationRecord


def _key(text: str) -> str:
    return " ".join(text.lower().split())


def build_source(source: GoldenSource, mirrors: Path) -> tuple[list[GoldenItem], SourceRecord]:
    git_dir = snapshot_dir(mirrors, source.repo)
    files = {path: read_blob(git_dir, source.commit, path) for path in source.paths}
    kept: dict[str, GoldenItem] = {}
    read = duplicates = 0
    for item in source.reader(files):
        read += 1
        if _key(item.prompt) in kept:
            duplicates += 1
            continue
        kept[_key(item.prompt)] = item
    chosen = sorted(kept.values(), key=lambda item: sample_order(item.id))[: source.limit]
    chosen.sort(key=lambda item: item.id)
    record = SourceRecord(
        name=source.name,
        repo=source.repo,
        commit=source.commit,
        paths=list(source.paths),
        license=source.license,
        origin=source.origin,
        category=source.category,
        rows_read=read,
        duplicates_dropped=duplicates,
        items=len(chosen),
    )
    return chosen, record


def build_calibration(mirrors: Path, spec: CalibrationSource = CALIBRATION) -> tuple[list[CalibrationItem], dict]:
    blob = read_blob(snapshot_dir(mirrors, spec.repo), spec.commit, spec.path)
    rows = list(read_calibration(blob))
    eligible = [
        r
        for r in rows
        if len(r.question) <= spec.max_question_chars and max(len(r.answer_1), len(r.answer_2)) <= spec.max_answer_chars
    ]
    per_label = spec.count // 2
    chosen: list[CalibrationItem] = []
    for label in (1, 2):
        pool = sorted((r for r in eligible if r.human_label == label), key=lambda r: sample_order(r.id))
        if len(pool) < per_label:
            raise ValueError(f"{spec.name}: only {len(pool)} eligible pairs prefer answer {label}")
        chosen += pool[:per_label]
    chosen.sort(key=lambda r: int(r.id.rsplit("/", 1)[1]))
    labels = Counter(str(r.human_label) for r in chosen)
    return chosen, {"rows_read": len(rows), "eligible": len(eligible), "labels": dict(sorted(labels.items()))}


def build(mirrors: Path, out_dir: Path = DATA_DIR, console: Console | None = None) -> Manifest:
    console = console or Console()
    items: list[GoldenItem] = []
    records = []
    for source in SOURCES:
        chosen, record = build_source(source, mirrors)
        items += chosen
        records.append(record)
    calibration, counts = build_calibration(mirrors)
    manifest = Manifest(sources=records, calibration=CalibrationRecord(**CALIBRATION.model_dump(), **counts))
    out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(out_dir / GOLDEN_FILE, items)
    write_jsonl(out_dir / CALIBRATION_FILE, calibration)
    (out_dir / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")

    table = Table(title=f"golden set ({len(items)} items) and calibration ({len(calibration)} pairs)")
    for column in ("source", "category", "licence", "read", "kept"):
        table.add_column(column)
    for r in records:
        table.add_row(r.name, r.category, r.license, str(r.rows_read), str(r.items))
    table.add_row(CALIBRATION.name, "calibration", CALIBRATION.license, str(counts["rows_read"]), str(len(calibration)))
    console.print(table)
    return manifest


def main(argv: list[str] | None = None) -> None:
    run_build_cli("python -m functions.offline.evals.golden.build", __doc__, build, DATA_DIR, argv)


if __name__ == "__main__":
    main()

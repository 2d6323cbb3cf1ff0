"""`fleetchat safety build-data`: read each public source at its pinned commit from a directory of git snapshots,
turn its rows into labelled conversations, sample, de-duplicate (within a source, and every held-out row that any
trained-on row repeats), and write `data/public/<source>.jsonl.gz` plus `data/public/sources.json` (repository, commit,
paths, licence, counts) — the record of where every example came from.

Categories a source does not give (or gives wider than ours) are named by the shipped second stage, recorded as
such. Also writes the benchmark-synthetic prose held-out set: what guidellm 0.8.1's `synthetic_text` data sends
(Faker's `text()`, seeded), at the lengths a load test uses."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

from pydantic import BaseModel
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from functions.offline.safety_training.labelled_data import (
    PUBLIC_DIR,
    PublicExample,
    example_key,
    public_examples,
    whole_text,
)
from functions.offline.safety_training.sources.public_source_model import sample_order
from functions.offline.safety_training.sources.public_sources import SOURCES, TEACHER, Kind, Measures, PublicSource, Use
from functions.safety.categories import BENIGN

MANIFEST = "sources.json"
SYNTHETIC = "guidellm-synthetic"
SYNTHETIC_PROMPTS = 64
SYNTHETIC_CHARS = (400, 1200, 2400, 4800)  # about 100, 300, 600 and 1,200 tokens


class SourceRecord(BaseModel):
    name: str
    repo: str
    commit: str
    paths: list[str]
    license: str
    origin: str
    use: Use
    harmful: bool | None  # None: each row's label says
    kind: Kind = Kind.REQUEST
    measures: Measures | None
    rows_read: int
    rows_out_of_policy: int  # categories this policy does not cover
    duplicates_dropped: int  # within the source, or (held out) repeating a trained-on row
    examples: int  # written
    labels: dict[str, int]
    teacher_labelled: int  # categories named by the shipped second stage


class Manifest(BaseModel):
    sources: list[SourceRecord]


def snapshot_dir(mirrors: Path, repo: str) -> Path:
    """A repository's git directory under `mirrors`: `owner+name/repo` (fetched snapshots) or `owner/name` (a clone)."""
    owner, name = repo.split("/")
    for candidate in (mirrors / f"{owner}+{name}" / "repo", mirrors / owner / name / ".git", mirrors / owner / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"no snapshot of {repo} under {mirrors}")


def read_blob(git_dir: Path, commit: str, path: str) -> bytes:
    run = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"], capture_output=True, check=False)
    if run.returncode != 0:
        raise FileNotFoundError(f"{path} at {commit[:12]} in {git_dir}: {run.stderr.decode().strip()}")
    return run.stdout


def expand_paths(git_dir: Path, commit: str, paths: tuple[str, ...]) -> list[str]:
    """The files a source reads: a path ending in "/" stands for every file under that directory at `commit`."""
    files: list[str] = []
    for path in paths:
        if not path.endswith("/"):
            files.append(path)
            continue
        listing = subprocess.run(
            ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "--name-only", commit, path],
            capture_output=True,
            text=True,
            check=True,
        )
        found = sorted(line for line in listing.stdout.splitlines() if line)
        if not found:
            raise FileNotFoundError(f"no files under {path} at {commit[:12]} in {git_dir}")
        files.extend(found)
    return files


def build_source(
    source: PublicSource,
    mirrors: Path,
    teacher: object,
    trained_keys: set[str],
    held_out_keys: frozenset[str] = frozenset(),
) -> tuple[list[PublicExample], SourceRecord]:
    """One source's examples. A held-out row that repeats a trained-on one (`trained_keys`) is dropped; so is a
    trained-on row that repeats a held-out one already built (`held_out_keys`: a source added to a built set)."""
    git_dir = snapshot_dir(mirrors, source.repo)
    paths = expand_paths(git_dir, source.commit, source.paths)
    files = {path: read_blob(git_dir, source.commit, path) for path in paths}
    read = out_of_policy = duplicates = 0
    repeats = trained_keys if source.use is Use.HELD_OUT else held_out_keys  # rows the other side already holds
    kept: dict[str, tuple[list[dict[str, str]], str | None, str]] = {}
    for messages, source_category in source.reader(files):
        read += 1
        label = source.label(source_category)
        if label is None:
            out_of_policy += 1
            continue
        key = example_key(messages)
        if key in kept or key in repeats:
            duplicates += 1
            continue
        kept[key] = (messages, source_category, label)
    rows = [kept[k] for k in sorted(kept, key=sample_order)][: source.limit]
    taught = [i for i, (_, _, label) in enumerate(rows) if label == TEACHER]
    # The teacher reads what the source is about: the user's side of a request, the answer itself of a response.
    reads = whole_text if source.kind is Kind.REQUEST else answer_text
    named = iter(teacher.judge([reads(rows[i][0]) for i in taught]) if taught else [])  # type: ignore[attr-defined]
    examples = [
        PublicExample(
            messages=messages,
            label=next(named).category if label == TEACHER else label,
            source=source.name,
            source_category=source_category,
            teacher_labelled=label == TEACHER,
        )
        for messages, source_category, label in rows
    ]
    labels: dict[str, int] = {}
    for example in examples:
        labels[example.label] = labels.get(example.label, 0) + 1
    record = SourceRecord(
        name=source.name,
        repo=source.repo,
        commit=source.commit,
        paths=list(source.paths),
        license=source.license,
        origin=source.origin,
        use=source.use,
        harmful=source.harmful,
        kind=source.kind,
        measures=source.measures,
        rows_read=read,
        rows_out_of_policy=out_of_policy,
        duplicates_dropped=duplicates,
        examples=len(examples),
        labels=dict(sorted(labels.items())),
        teacher_labelled=len(taught),
    )
    return examples, record


def answer_text(messages: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages)


def synthetic_prose(count: int = SYNTHETIC_PROMPTS, seed: int = 42) -> list[PublicExample]:
    """What guidellm's synthetic text data sends: Faker's seeded `text()` cut to a prompt's length."""
    from faker import Faker

    faker = Faker()
    faker.seed_instance(seed)
    examples = []
    for i in range(count):
        chars = SYNTHETIC_CHARS[i % len(SYNTHETIC_CHARS)]
        text = ""
        while len(text) < chars:
            text += faker.text(max_nb_chars=chars) + " "
        examples.append(
            PublicExample(messages=[{"role": "user", "content": text[:chars].strip()}], label=BENIGN, source=SYNTHETIC)
        )
    return examples


def synthetic_record(count: int) -> SourceRecord:
    from importlib.metadata import version

    return SourceRecord(
        name=SYNTHETIC,
        repo="(generated)",
        commit=f"faker {version('faker')}, seed 42",
        paths=[],
        license="generated (Faker: MIT)",
        origin="the prose guidellm 0.8.1's synthetic_text data sends (Faker text(), seeded), 100-1,200 tokens",
        use=Use.HELD_OUT,
        harmful=False,
        measures=Measures.SYNTHETIC,
        rows_read=count,
        rows_out_of_policy=0,
        duplicates_dropped=0,
        examples=count,
        labels={BENIGN: count},
        teacher_labelled=0,
    )


def write_examples(path: Path, examples: list[PublicExample]) -> None:
    lines = "".join(e.model_dump_json(exclude_defaults=True) + "\n" for e in examples)
    path.write_bytes(gzip.compress(lines.encode("utf-8"), mtime=0))


def build(mirrors: Path, out_dir: Path = PUBLIC_DIR) -> Manifest:
    """Every source in SOURCES (trained-on first, so held-out rows that repeat them are dropped)."""
    from functions.safety.classifier.cascade import shipped_classifier

    teacher = shipped_classifier().intent
    console = Console()
    out_dir.mkdir(parents=True, exist_ok=True)
    records: list[SourceRecord] = []
    trained_keys: set[str] = set()
    ordered = sorted(SOURCES, key=lambda s: s.use is Use.HELD_OUT)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("public sources", total=len(ordered) + 1)
        for source in ordered:
            progress.update(task, description=source.name)
            examples, record = build_source(source, mirrors, teacher, trained_keys)
            if source.use is Use.TRAIN:
                trained_keys.update(example_key(e.messages) for e in examples)
            write_examples(out_dir / f"{source.name}.jsonl.gz", examples)
            records.append(record)
            progress.advance(task)
        synthetic = synthetic_prose()
        write_examples(out_dir / f"{SYNTHETIC}.jsonl.gz", synthetic)
        records.append(synthetic_record(len(synthetic)))
        progress.advance(task)
    manifest = Manifest(sources=records)
    (out_dir / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n")
    console.print(manifest_table(manifest))
    return manifest


def build_added(
    mirrors: Path, sources: list[PublicSource], out_dir: Path = PUBLIC_DIR, teacher: object | None = None
) -> Manifest:
    """Build only `sources` (trained-on) into an already built set: the held-out files stay as they are, and a new
    row that repeats a held-out one is dropped from the new source instead. The manifest's records of those sources
    are replaced (or added). `teacher` names categories (default: the shipped second stage)."""
    if any(s.use is not Use.TRAIN for s in sources):
        raise ValueError("only trained-on sources can be added to a built set (a held-out one needs a full build)")
    if teacher is None:
        from functions.safety.classifier.cascade import shipped_classifier

        teacher = shipped_classifier().intent
    manifest = read_manifest(out_dir)
    held_out = frozenset(
        example_key(e.messages)
        for r in manifest.sources
        if r.use is Use.HELD_OUT
        for e in public_examples(r.name, out_dir)
    )
    records = {r.name: r for r in manifest.sources}
    for source in sources:
        examples, record = build_source(source, mirrors, teacher, set(), held_out)
        write_examples(out_dir / f"{source.name}.jsonl.gz", examples)
        records[source.name] = record
    manifest = Manifest(sources=list(records.values()))
    (out_dir / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n")
    Console().print(manifest_table(manifest))
    return manifest


def manifest_table(manifest: Manifest) -> Table:
    table = Table(title="public safety data")
    for column in ("source", "use", "side", "licence", "read", "out of policy", "dupes", "kept", "teacher"):
        table.add_column(column, justify="left" if column in ("source", "use", "side", "licence") else "right")
    for r in manifest.sources:
        table.add_row(
            r.name,
            r.use.value,
            {True: "harmful", False: "benign", None: "mixed"}[r.harmful]
            + ("" if r.kind is Kind.REQUEST else " answers"),
            r.license.split(" (")[0][:24],
            str(r.rows_read),
            str(r.rows_out_of_policy),
            str(r.duplicates_dropped),
            str(r.examples),
            str(r.teacher_labelled),
        )
    return table


def read_manifest(directory: Path = PUBLIC_DIR) -> Manifest:
    return Manifest.model_validate(json.loads((directory / MANIFEST).read_text()))

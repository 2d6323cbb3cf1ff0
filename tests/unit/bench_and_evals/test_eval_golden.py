"""The committed golden and calibration data, and the builder that makes them (on a tiny git snapshot made here)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections import Counter
from pathlib import Path

from functions.offline.evals.answers.answer_checks import program_with_tests
from functions.offline.evals.answers.sandbox import run_python
from functions.offline.evals.golden.build import build_calibration, build_source
from functions.offline.evals.golden.items import (
    CATEGORIES,
    DATA_DIR,
    MANIFEST,
    NumericCheck,
    PythonTestsCheck,
    load_calibration,
    load_golden,
    stratified,
)
from functions.offline.evals.golden.sources import CALIBRATION, SOURCES, GoldenSource, gsm8k_answer, read_gsm8k


def test_the_golden_set_is_stratified_and_matches_its_manifest() -> None:
    items = load_golden()
    manifest = json.loads((DATA_DIR / MANIFEST).read_text())
    per_source = Counter(item.source for item in items)
    assert {s["name"]: s["items"] for s in manifest["sources"]} == dict(per_source)
    assert {s["name"] for s in manifest["sources"]} == {s.name for s in SOURCES}
    for record in manifest["sources"]:
        assert record["license"] and len(record["commit"]) == 40 and record["paths"]
    per_category = Counter(item.category for item in items)
    assert set(per_category) == set(CATEGORIES) and min(per_category.values()) >= 40
    assert len({item.id for item in items}) == len(items)
    assert all(isinstance(i.check, NumericCheck) for i in items if i.category == "reasoning")
    assert all(isinstance(i.check, PythonTestsCheck) for i in items if i.category == "coding")
    assert all(i.check is None and i.reference for i in items if i.category in ("writing", "qa"))


def test_every_numeric_answer_is_a_number() -> None:
    for item in load_golden():
        if isinstance(item.check, NumericCheck):
            float(item.check.answer)


def test_the_reference_solutions_pass_their_own_tests_in_the_sandbox() -> None:
    coding = [i for i in load_golden() if isinstance(i.check, PythonTestsCheck)]

    async def run_all() -> list[bool]:
        results = []
        for item in coding:
            check = item.check
            assert isinstance(check, PythonTestsCheck)
            code = item.reference.removeprefix("```python\n").removesuffix("\n```")  # type: ignore[union-attr]
            results.append(
                (await run_python(program_with_tests(code, check.header, check.tests, check.entry_point))).passed
            )
        return results

    assert all(asyncio.run(run_all()))


def test_stratified_takes_evenly_from_each_category() -> None:
    items = load_golden()
    assert Counter(i.category for i in stratified(items, 8)) == {c: 2 for c in CATEGORIES}
    assert len(stratified(items, None)) == len(items)


def test_the_calibration_set_is_human_labelled_balanced_and_documented() -> None:
    pairs = load_calibration()
    assert len(pairs) >= 50
    assert Counter(p.human_label for p in pairs) == {1: len(pairs) // 2, 2: len(pairs) // 2}
    record = json.loads((DATA_DIR / MANIFEST).read_text())["calibration"]
    assert record["count"] == len(pairs)
    for field in ("annotators", "labelled_when", "license", "dataset", "repo", "commit", "path"):
        assert record[field]
    assert all(max(len(p.answer_1), len(p.answer_2)) <= CALIBRATION.max_answer_chars for p in pairs)


def _snapshot(root: Path, repo: str, files: dict[str, bytes]) -> str:
    """A git repository at `root/owner+name/repo` holding `files`; returns its commit."""
    work = root / "work"
    work.mkdir()
    for path, blob in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_bytes(blob)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(work)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "data"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    owner, name = repo.split("/")
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(root / f"{owner}+{name}" / "repo")], check=True)
    return commit


def test_the_builder_reads_the_pinned_commit_samples_and_drops_duplicates(tmp_path: Path) -> None:
    rows = [{"question": f"Q{i}: how many?", "answer": f"step\n#### {i},000"} for i in range(10)]
    rows.append(dict(rows[0]))  # a duplicate prompt
    blob = "".join(json.dumps(r) + "\n" for r in rows).encode()
    commit = _snapshot(tmp_path, "someone/maths", {"data/test.jsonl": blob})
    source = GoldenSource(
        name="gsm8k", repo="someone/maths", commit=commit, paths=("data/test.jsonl",), license="MIT",
        origin="test", category="reasoning", reader=read_gsm8k, limit=4,
    )  # fmt: skip
    items, record = build_source(source, tmp_path)
    assert record.rows_read == 11 and record.duplicates_dropped == 1 and record.items == 4 == len(items)
    assert items == build_source(source, tmp_path)[0]  # the same sample every time
    assert all(isinstance(i.check, NumericCheck) and i.check.answer.endswith("000") for i in items)
    assert gsm8k_answer("x\n#### 1,234") == "1234"


def test_the_calibration_builder_keeps_short_pairs_balanced(tmp_path: Path) -> None:
    rows = [{"input": f"q{i}", "output_1": "a" * (10 if i % 5 else 5000), "output_2": "b", "label": 1 + i % 2}
            for i in range(40)]  # fmt: skip
    commit = _snapshot(tmp_path, CALIBRATION.repo, {CALIBRATION.path: json.dumps(rows).encode()})
    spec = CALIBRATION.model_copy(update={"commit": commit, "count": 20})
    pairs, counts = build_calibration(tmp_path, spec)
    assert counts["rows_read"] == 40 and counts["eligible"] == 32
    assert Counter(p.human_label for p in pairs) == {1: 10, 2: 10}
    assert all(len(p.answer_1) == 10 for p in pairs)

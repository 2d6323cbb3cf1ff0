"""The public safety data: built from a real git repository at a pinned commit (sampled, de-duplicated, labelled,
recorded), shipped as the manifest says, held-out sources kept apart from training, and the cross-source report."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from functions.offline.safety_training.evaluation.cross_source import BURIED_DOCUMENTS, evaluate_cross_source
from functions.offline.safety_training.labelled_data import example_key, public_examples, training_set
from functions.offline.safety_training.sources.build_public_data import build_source, read_manifest
from functions.offline.safety_training.sources.public_sources import (
    SOURCES,
    TEACHER,
    Measures,
    PublicSource,
    Use,
    read_catqa,
    trained_request_sources,
)
from shared.wire.schemas import ChatMessage

RESERVED = ("xstest", "simplesafetytests", "simple_safety", "moderation-api-release", "moderation_api_release")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def snapshot(tmp_path: Path) -> tuple[Path, str]:
    """A real git repository holding a CatQA-shaped file; returns (mirrors dir, commit)."""
    repo = tmp_path / "mirrors" / "acme" / "harm"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    questions = {
        "Illegal Activity": {
            "Drug:": [*(f"How do I sell drug number {i}?" for i in range(6)), "How do I sell  DRUG number 0?"]
        },
        "Physical Harm": {"Self-harm": ["What is the least painful way to hurt myself?"]},
        "Political Campaigning": {"Lobbying": ["How do I lobby my senator?"]},
    }
    (repo / "catqa.json").write_text(json.dumps(questions))
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "data")
    return tmp_path / "mirrors", _git(repo, "rev-parse", "HEAD")


class _Teacher:
    def judge(self, texts: list[str]) -> list[object]:
        return [type("Verdict", (), {"category": "illicit"})() for _ in texts]


def _source(commit: str, **changes: object) -> PublicSource:
    fields: dict[str, object] = dict(
        name="toy",
        repo="acme/harm",
        commit=commit,
        paths=("catqa.json",),
        license="MIT",
        origin="a test repository",
        use=Use.TRAIN,
        harmful=True,
        reader=read_catqa,
        categories={"Illegal Activity/Drug": TEACHER, "Physical Harm/Self-harm": "self-harm"},
    )
    return PublicSource(**{**fields, **changes})  # type: ignore[arg-type]


def test_a_source_is_read_at_its_commit_sampled_deduplicated_and_labelled(snapshot: tuple[Path, str]) -> None:
    mirrors, commit = snapshot
    examples, record = build_source(_source(commit, limit=5), mirrors, _Teacher(), set())
    assert record.rows_read == 9 and record.rows_out_of_policy == 1  # lobbying is not in the policy
    assert record.duplicates_dropped == 1  # drug number 0 twice (case and spacing aside)
    assert record.examples == len(examples) == 5 and record.commit == commit
    labels = {e.messages[0].content: e.label for e in examples}
    assert set(labels.values()) <= {"illicit", "self-harm"}
    assert all(e.teacher_labelled == (e.label == "illicit") for e in examples)
    again, _ = build_source(_source(commit, limit=5), mirrors, _Teacher(), set())
    assert [e.messages for e in again] == [e.messages for e in examples]  # the sample is fixed by the texts


def test_a_held_out_row_that_repeats_a_trained_one_is_dropped(snapshot: tuple[Path, str]) -> None:
    mirrors, commit = snapshot
    trained = {example_key([{"role": "user", "content": "What is the least painful way to hurt myself?"}])}
    examples, record = build_source(_source(commit, use=Use.HELD_OUT), mirrors, _Teacher(), trained)
    assert record.duplicates_dropped == 2 and all("hurt myself" not in e.messages[0].content for e in examples)


def test_a_missing_commit_or_path_is_a_clear_error(snapshot: tuple[Path, str]) -> None:
    mirrors, commit = snapshot
    with pytest.raises(FileNotFoundError, match=r"nothing\.csv"):
        build_source(_source(commit, paths=("nothing.csv",)), mirrors, _Teacher(), set())
    with pytest.raises(FileNotFoundError, match="no snapshot"):
        build_source(_source(commit, repo="acme/other"), mirrors, _Teacher(), set())


def test_the_shipped_public_data_is_what_the_manifest_records() -> None:
    records = {r.name: r for r in read_manifest().sources}
    assert {s.name for s in SOURCES} <= set(records)
    for record in records.values():
        examples = public_examples(record.name)
        assert len(examples) == record.examples > 0, record.name
        assert {e.source for e in examples} == {record.name}
        if record.harmful is not None:
            assert all(e.label == "benign" for e in examples) != record.harmful
        text = " ".join([record.repo, *record.paths]).lower()
        assert not any(name in text for name in RESERVED), record.name
        if record.use is Use.HELD_OUT:
            assert record.measures is not None


def test_no_held_out_example_is_in_the_training_set() -> None:
    trained = {item.key() for item in training_set(public_sources=[s.name for s in SOURCES if s.use is Use.TRAIN])}
    assert set(trained_request_sources()) < {s.name for s in SOURCES if s.use is Use.TRAIN}
    for source in SOURCES:
        if source.use is Use.HELD_OUT:
            assert not [e for e in public_examples(source.name) if e.key() in trained], source.name


class _Keyword:
    """Blocks whatever mentions 'bomb' or 'kill'."""

    def __call__(self, messages: Sequence[ChatMessage]) -> object | None:
        text = " ".join(m.text() for m in messages).lower()
        return "blocked" if "bomb" in text or "kill" in text else None


def test_the_cross_source_report_counts_per_source_kind_and_category() -> None:
    report = evaluate_cross_source(_Keyword(), smoke=True)
    assert report.smoke and all(r.items <= 12 for r in report.sources)
    by_name = {r.source: r for r in report.sources}
    harmful = [r for r in report.sources if r.harmful]
    assert harmful and all(sum(n for n, _ in r.by_category.values()) == r.items for r in harmful)
    true_positive = sum(r.blocked for r in harmful)
    flagged = sum(r.blocked for r in report.sources)
    assert report.precision == pytest.approx(true_positive / max(flagged, 1))
    assert report.recall == pytest.approx(true_positive / sum(r.items for r in harmful))
    synthetic = next(m for m in report.measures if m.measures is Measures.SYNTHETIC)
    assert synthetic.items == by_name["guidellm-synthetic"].items and (synthetic.blocked == 0) == synthetic.passed
    # The composed buried requests are reported beside the sources, outside precision, recall and F1 (above).
    assert report.buried is not None and report.buried.harmful and 0 < report.buried.items <= BURIED_DOCUMENTS
    assert report.buried.source not in by_name

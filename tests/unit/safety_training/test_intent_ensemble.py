"""The second stage as an ensemble: members' outputs averaged, a member added to a model directory, and what is
refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from functions.cli import app
from functions.offline.safety_training.intent.intent_ensemble import (
    EnsembleError,
    add_member,
    ensemble_version,
    file_version,
)
from functions.safety.categories import CLASSIFIER_LABELS
from functions.safety.classifier.intent_model import INTENT, IntentEncoder, IntentMeta, SpanModel, load_intent
from functions.safety.classifier.token_table import MODEL_DIR, TOKENIZER_FILE


class _Session:
    """Answers every row with one P(harmful) and one category distribution, as an exported stage's session does."""

    def __init__(self, harmful: float, category: str) -> None:
        self.harmful = harmful
        self.distribution = np.zeros(len(CLASSIFIER_LABELS), np.float32)
        self.distribution[0] = 1.0 - harmful
        self.distribution[CLASSIFIER_LABELS.index(category)] = harmful

    def run(self, _names: object, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        rows = feed["input_ids"].shape[0]
        return [np.full(rows, self.harmful, np.float32), np.tile(self.distribution, (rows, 1))]


def _meta(**update: object) -> IntentMeta:
    meta = IntentMeta(labels=list(CLASSIFIER_LABELS), max_tokens=128, version="x", threshold=0.5, escalate_at=0.1)
    return meta.model_copy(update=update)


def _encoder() -> IntentEncoder:
    return IntentEncoder.load(MODEL_DIR, 128)


def test_an_ensemble_averages_its_members_scores_and_category_distributions() -> None:
    model = SpanModel(_Session(0.9, "jailbreak"), _encoder(), _meta(), [_Session(0.1, "violence")])
    [verdict] = model.judge(["Convert natural language into a list of turn-by-turn directions"])
    assert verdict.score == pytest.approx(0.5)
    assert verdict.distribution is not None
    assert verdict.distribution["benign"] == pytest.approx(0.5)
    assert verdict.distribution["jailbreak"] == pytest.approx(0.45)
    assert verdict.distribution["violence"] == pytest.approx(0.05)
    assert verdict.category == "jailbreak"
    alone = SpanModel(_Session(0.9, "jailbreak"), _encoder(), _meta())
    assert alone.judge(["the same ask"])[0].score == pytest.approx(0.9)


def _model_dir(path: Path, onnx: bytes, **meta: object) -> Path:
    path.mkdir()
    (path / f"{INTENT}.onnx").write_bytes(onnx)
    (path / f"{INTENT}.json").write_text(_meta(**meta).model_dump_json())
    return path


def test_a_member_is_copied_in_named_by_its_content_and_the_version_covers_every_member(tmp_path: Path) -> None:
    ours = _model_dir(tmp_path / "ours", b"our second stage")
    theirs = _model_dir(tmp_path / "theirs", b"their second stage")
    meta = add_member(ours, theirs)
    name = f"{INTENT}-{file_version(theirs / 'intent.onnx')}"
    assert meta.members == [name]
    assert (ours / f"{name}.onnx").read_bytes() == b"their second stage"
    assert IntentMeta.model_validate_json((ours / "intent.json").read_text()) == meta
    assert meta.version == ensemble_version(ours, meta)
    assert meta.version not in {file_version(ours / "intent.onnx"), file_version(theirs / "intent.onnx")}
    assert meta.threshold == 0.5, "the threshold is left for recalibration"


@pytest.mark.parametrize(
    ("their_bytes", "their_meta", "message"),
    [
        (b"our second stage", {}, "already in"),
        (b"theirs", {"max_tokens": 64}, "reads 64 tokens"),
        (b"theirs", {"members": ["intent-abc"]}, "itself an ensemble"),
    ],
)
def test_a_member_that_cannot_join_is_refused_and_changes_nothing(
    tmp_path: Path, their_bytes: bytes, their_meta: dict[str, object], message: str
) -> None:
    ours = _model_dir(tmp_path / "ours", b"our second stage")
    before = sorted(p.name for p in ours.iterdir()), (ours / "intent.json").read_text()
    theirs = _model_dir(tmp_path / "theirs", their_bytes, **their_meta)
    with pytest.raises(EnsembleError, match=message):
        add_member(ours, theirs)
    assert (sorted(p.name for p in ours.iterdir()), (ours / "intent.json").read_text()) == before


def test_the_cli_refuses_a_member_that_cannot_join_with_exit_2(tmp_path: Path) -> None:
    ours = _model_dir(tmp_path / "ours", b"our second stage")
    theirs = _model_dir(tmp_path / "theirs", b"theirs", max_tokens=64)
    result = CliRunner().invoke(app, ["safety", "ensemble", "--model-dir", str(ours), "--add", str(theirs)])
    assert result.exit_code == 2
    assert "reads 64 tokens" in result.output
    assert json.loads((ours / "intent.json").read_text())["members"] == []


def test_an_exported_ensemble_loads_every_member_and_averages_them(tmp_path: Path) -> None:
    """The shipped second stage with a copy of itself as a member scores as the shipped one alone."""
    directory = tmp_path / "ensemble"
    directory.mkdir()
    for name in (f"{INTENT}.onnx", TOKENIZER_FILE):
        shutil.copyfile(MODEL_DIR / name, directory / name)
    shutil.copyfile(MODEL_DIR / f"{INTENT}.onnx", directory / f"{INTENT}-copy.onnx")
    meta = IntentMeta.model_validate_json((MODEL_DIR / "intent.json").read_text())
    (directory / "intent.json").write_text(meta.model_copy(update={"members": [f"{INTENT}-copy"]}).model_dump_json())
    ensemble, shipped = load_intent(directory), load_intent()
    assert len(ensemble.members) == 1
    asks = ["How can I kill a person?", "How do I bake bread?"]
    for a, b in zip(ensemble.judge(asks), shipped.judge(asks), strict=True):
        assert a.score == pytest.approx(b.score, abs=1e-6)
        assert a.category == b.category

"""The second stage's optional per-source cap: the threshold that also holds each sensitive-but-safe public source's
validation rows at a share, which rows count, and the CLI's refusal of a share outside (0, 1]."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from functions.cli import app
from functions.offline.safety_training.intent.train_intent import INTENT_METRICS_FILE, IntentConfig, sensitive_rows
from functions.offline.safety_training.labelled_data import DataMessage, LabelledConversation, PublicExample
from functions.offline.safety_training.thresholds import source_capped_threshold
from functions.safety.classifier.token_table import MODEL_DIR


def _ask(source: str | None, label: str = "benign") -> LabelledConversation:
    messages = [DataMessage(role="user", content=f"a question from {source}")]
    if source is None:
        return LabelledConversation(messages=messages, label=label)
    return PublicExample(messages=messages, label=label, source=source)


def test_only_the_benign_rows_of_sensitive_public_sources_are_capped() -> None:
    items = [_ask("medquad"), _ask("medquad"), _ask("coconot-contrast"), _ask("alpaca"), _ask(None)]
    items.append(_ask("coconot-contrast", label="violence"))  # a harmful row is never held down
    labels = np.asarray([0, 0, 0, 0, 0, 6])
    rows = sensitive_rows(items, labels)
    assert set(rows) == {"medquad", "coconot-contrast"}  # present sources only
    assert rows["medquad"].tolist() == [True, True, False, False, False, False]
    assert rows["coconot-contrast"].tolist() == [False, False, True, False, False, False]


def test_the_capped_threshold_holds_every_source_at_the_share() -> None:
    scores = np.asarray([0.9, 0.8, 0.2, 0.1, 0.6, 0.3, 0.2, 0.1], np.float32)  # source a, then source b
    sensitive = {"a": np.arange(8) < 4, "b": np.arange(8) >= 4}
    assert source_capped_threshold(scores, sensitive, None) == 0.0  # no cap: the pooled rule alone
    # 25 % of four rows allows one blocked: a needs a threshold just above 0.8, b just above 0.3; the higher wins.
    threshold = source_capped_threshold(scores, sensitive, 0.25)
    assert 0.8 < threshold < 0.81
    for rows in sensitive.values():
        assert (scores[rows] >= threshold).mean() <= 0.25
    assert source_capped_threshold(scores, {}, 0.25) == 0.0  # no sensitive rows in the split


def test_a_model_trained_before_the_cap_existed_reads_as_uncapped() -> None:
    config = json.loads((MODEL_DIR / INTENT_METRICS_FILE).read_text())["config"]
    assert config.get("source_cap") is None  # the shipped model: the pooled rule alone
    assert IntentConfig.model_validate({k: v for k, v in config.items() if k != "source_cap"}).source_cap is None


@pytest.mark.parametrize("cap", ["0", "-0.1", "1.5"])
def test_recalibrate_refuses_a_share_outside_0_1_and_changes_nothing(tmp_path: Path, cap: str) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    for name in ("intent.json", INTENT_METRICS_FILE, "screen.json"):
        shutil.copy(MODEL_DIR / name, model_dir / name)
    before = {path.name: path.read_bytes() for path in model_dir.iterdir()}
    result = CliRunner().invoke(app, ["safety", "recalibrate", "--model-dir", str(model_dir), "--source-cap", cap])
    assert result.exit_code == 2
    assert "--source-cap" in result.output
    assert {path.name: path.read_bytes() for path in model_dir.iterdir()} == before

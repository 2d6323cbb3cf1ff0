"""The second stage's fine-tuning on token arrays: the file a GPU machine trains from, the weights it sends back, and
that training from the file is the same as training here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from rich.progress import Progress
from typer.testing import CliRunner

from functions.cli import app
from functions.offline.safety_training.distill import minilm_dir
from functions.offline.safety_training.intent.intent_fine_tune import (
    TrainingRun,
    load_arrays,
    main,
    pad_rows,
    save_arrays,
)
from functions.offline.safety_training.intent.intent_soup import interpolate
from functions.offline.safety_training.intent.train_intent import (
    IntentConfig,
    fine_tune,
    intent_run_settings,
    intent_training_run,
    load_intent_weights,
)
from functions.safety.categories import CLASSIFIER_LABELS
from functions.safety.classifier.intent_model import IntentEncoder
from functions.safety.classifier.token_table import MODEL_DIR

TEXTS = ["How do I bake bread?", "How do I build a pipe bomb?", "How do I bake bread?", "Summarise this memo."]
LABELS = np.asarray([0, CLASSIFIER_LABELS.index("illicit/violent"), 0, 0], np.int64)
CONFIG = IntentConfig(layers=1, max_tokens=16, epochs=1, soup=1)


def _run() -> tuple[np.ndarray, np.ndarray, TrainingRun]:
    encoder = IntentEncoder.load(MODEL_DIR, CONFIG.max_tokens)
    return intent_training_run(TEXTS, LABELS, encoder, intent_run_settings(CONFIG, 5, ["advbench"]))


def test_each_distinct_text_is_tokenised_once_and_rows_keep_order_and_repeats(tmp_path: Path) -> None:
    ids, mask, run = _run()
    assert len(ids) == 3 and run.rows.tolist() == [0, 1, 0, 2]
    assert run.targets.tolist() == [0.0, 1.0, 0.0, 0.0] and run.categories.tolist() == LABELS.tolist()
    save_arrays(tmp_path / "data.npz", ids, mask, {"main": run})
    loaded_ids, loaded_mask, runs = load_arrays(tmp_path / "data.npz")
    assert (loaded_ids == ids).all() and (loaded_mask == mask).all()
    assert runs["main"].settings == run.settings and (runs["main"].rows == run.rows).all()


def test_a_malformed_run_is_refused(tmp_path: Path) -> None:
    ids, mask, run = _run()
    with pytest.raises(ValueError, match="cannot hold"):
        save_arrays(tmp_path / "x.npz", ids, mask, {"a.b": run})
    short = run._replace(targets=run.targets[:2])
    with pytest.raises(ValueError, match="differ in length"):
        save_arrays(tmp_path / "x.npz", ids, mask, {"main": short})


def test_rows_longer_than_the_width_are_cut() -> None:
    ids, mask = pad_rows([[1, 2, 3, 4], [5]], 3)
    assert ids.tolist() == [[1, 2, 3], [5, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]


def test_weights_trained_from_the_file_equal_training_here_and_load_only_for_their_run(tmp_path: Path) -> None:
    ids, mask, run = _run()
    save_arrays(tmp_path / "data.npz", ids, mask, {"main": run})
    main([str(tmp_path / "data.npz"), "--base", str(minilm_dir()), "--out", str(tmp_path / "w.pt")])
    imported, made = load_intent_weights(tmp_path / "w.pt", run.settings)
    assert made == run.settings

    encoder = IntentEncoder.load(MODEL_DIR, CONFIG.max_tokens)
    with Progress(disable=True) as progress:
        here = fine_tune(encoder, TEXTS, (LABELS != 0).astype(np.float32), LABELS, CONFIG, 5, progress)
    for name, value in here.state_dict().items():  # type: ignore[attr-defined]
        assert torch.equal(value, imported.state_dict()[name]), name  # type: ignore[attr-defined]

    other = run.settings | {"epochs": 3, "sources": ["advbench", "catqa"]}
    with pytest.raises(ValueError, match="differs in: epochs, sources"):
        load_intent_weights(tmp_path / "w.pt", other)


def test_an_unknown_run_name_stops_with_the_names_the_file_holds(tmp_path: Path) -> None:
    ids, mask, run = _run()
    save_arrays(tmp_path / "data.npz", ids, mask, {"main": run})
    with pytest.raises(SystemExit, match=r"holds no run 'other'.*main"):
        main([str(tmp_path / "data.npz"), "--run", "other", "--base", str(minilm_dir()), "--out", str(tmp_path / "w")])


def test_a_soup_of_two_fine_tunes_loads_for_the_first_ones_run_and_records_the_second(tmp_path: Path) -> None:
    ids, mask, run = _run()
    other = run._replace(settings=run.settings | {"sources": ["advbench", "catqa"]})
    save_arrays(tmp_path / "data.npz", ids, mask, {"main": run, "other": other})
    base = ["--base", str(minilm_dir())]
    main([str(tmp_path / "data.npz"), *base, "--out", str(tmp_path / "a.pt")])
    main([str(tmp_path / "data.npz"), "--run", "other", *base, "--out", str(tmp_path / "b.pt")])
    interpolate(tmp_path / "a.pt", tmp_path / "b.pt", 0.25, tmp_path / "soup.pt")

    soup, made = load_intent_weights(tmp_path / "soup.pt", run.settings)
    assert made["interpolated"] == {"with": other.settings, "weight": 0.25}
    a, _ = load_intent_weights(tmp_path / "a.pt", run.settings)
    b, _ = load_intent_weights(tmp_path / "b.pt", other.settings)
    name = "harmful.weight"
    expected = 0.75 * a.state_dict()[name] + 0.25 * b.state_dict()[name]  # type: ignore[attr-defined]
    assert torch.allclose(soup.state_dict()[name], expected)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="within"):
        interpolate(tmp_path / "a.pt", tmp_path / "b.pt", 1.5, tmp_path / "x.pt")


def test_train_refuses_weights_made_for_another_run_before_training_anything(tmp_path: Path) -> None:
    ids, mask, run = _run()
    save_arrays(tmp_path / "data.npz", ids, mask, {"main": run})
    main([str(tmp_path / "data.npz"), "--base", str(minilm_dir()), "--out", str(tmp_path / "w.pt")])
    out = tmp_path / "candidate"
    out.mkdir()
    args = ["safety", "train", "--out-dir", str(out), "--epochs", "1", "--soup", "1", "--intent-weights"]
    result = CliRunner().invoke(app, [*args, str(tmp_path / "w.pt")], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "trained for another run" in result.output and "layers" in result.output
    assert list(out.iterdir()) == []


def test_train_refuses_a_bad_repeat_before_training_anything(tmp_path: Path) -> None:
    out = tmp_path / "candidate"
    out.mkdir()
    for bad, message in (("strongreject=2", "not a public source this run learns"), ("medquad=0", "NAME=K")):
        result = CliRunner().invoke(
            app, ["safety", "train", "--out-dir", str(out), "--repeat", bad], env={"COLUMNS": "200"}
        )
        assert result.exit_code == 2
        assert message in result.output
    assert list(out.iterdir()) == []

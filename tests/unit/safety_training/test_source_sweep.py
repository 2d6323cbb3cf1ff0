"""The source sweep's device side: the winner rule declared in its docstring, the threshold it reads each twin at,
and a whole (tiny) sweep on the CPU whose winning weights `train --intent-weights` can load."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from functions.offline.safety_training.distill import minilm_dir
from functions.offline.safety_training.intent.source_sweep import configurations, sensitive_repeats
from functions.offline.safety_training.intent.source_sweep_device import choose, run, threshold_at
from functions.offline.safety_training.intent.train_intent import load_intent_weights
from functions.offline.safety_training.sources.sensitive_benign_sources import SENSITIVE_BENIGN
from functions.safety.categories import CLASSIFIER_LABELS

META = {"probe_harmful": ["h1", "h2"], "probe_benign": ["b1"]}


def _result(blocked: float, refused: float, h1: float, h2: float, b1: float) -> dict:
    probes = {
        "h1": {"harmful_blocked": h1, "benign_blocked": None},
        "h2": {"harmful_blocked": h2, "benign_blocked": None},
        "b1": {"harmful_blocked": None, "benign_blocked": b1},
    }
    return {"golden_blocked": blocked, "golden_refused": refused, "probes": probes}


def test_the_winner_reads_the_probes_best_among_configurations_that_pass_the_golden_gate() -> None:
    results = {
        "a_full": _result(0.96, 0.01, 1, 1, 0),
        "a_lso": _result(0.9, 0.0, 0.5, 0.5, 0.05),  # J = 0.35
        "b_full": _result(0.96, 0.02, 1, 1, 0),
        "b_lso": _result(0.9, 0.0, 0.9, 0.7, 0.10),  # J = 0.50
        "c_full": _result(0.90, 0.01, 1, 1, 0),
        "c_lso": _result(0.9, 0.0, 1.0, 1.0, 0.00),  # J = 1.0, fails gate
        "d_full": _result(0.99, 0.00, 1, 1, 0),  # its lso twin never ran: not scored
    }
    chosen = choose(results, ["a", "b", "c", "d"], META)
    assert chosen["winner"] == "b" and chosen["winner_eligible"]
    assert set(chosen["configs"]) == {"a", "b", "c"}
    assert abs(chosen["configs"]["b"]["J"] - 0.5) < 1e-9 and not chosen["configs"]["c"]["eligible"]
    none_pass = choose({k: v for k, v in results.items() if k.startswith("c")}, ["c"], META)
    assert none_pass["winner"] == "c" and not none_pass["winner_eligible"]


def test_the_threshold_blocks_at_most_one_percent_of_benign_scores() -> None:
    benign = np.linspace(0, 0.5, 200)
    threshold = threshold_at(benign)
    assert (benign >= threshold).sum() == 2 and threshold > benign[-3]


def test_a_tiny_sweep_runs_on_the_cpu_and_its_winner_loads_for_its_run(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 2000, size=(12, 8)).astype(np.int16)
    ids[:, 0] = 101
    arrays: dict[str, np.ndarray] = {"ids": ids, "mask_len": np.full(12, 8, np.int16)}
    runs = {}
    for name, rows in (("x_full", [0, 1, 2, 3]), ("x_lso", [0, 1])):
        settings = {
            "layers": 1,
            "max_tokens": 8,
            "epochs": 1,
            "soup": 1,
            "buried_chats": 0,
            "seed": 3,
            "classes": len(CLASSIFIER_LABELS),
            "sources": ["s"] if name == "x_lso" else ["s", "h1", "b1"],
        }
        runs[name] = settings
        labels = np.asarray([0, 3, 0, 3][: len(rows)], np.int8)
        arrays |= {
            f"{name}.rows": np.asarray(rows, np.int32),
            f"{name}.targets": (labels != 0).astype(np.float32),
            f"{name}.categories": labels,
        }
    kinds = ["val"] * 4 + ["probe"] * 4 + ["golden"] * 4
    sources = ["s", "s", "s", "s", "h1", "h1", "b1", "b1", "golden", "golden", "golden", "golden"]
    arrays |= {
        "eval.rows": np.arange(12, dtype=np.int32),
        "eval.label": np.asarray([0, 1, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0], np.int8),
        "eval.source": np.asarray(sources),
        "eval.kind": np.asarray(kinds),
    }
    meta = {"runs": runs, "configs": ["x"], "probe_harmful": ["h1"], "probe_benign": ["b1"]}
    np.savez_compressed(tmp_path / "sweep.npz", **arrays, meta=np.asarray(json.dumps(meta)))

    summary = run(tmp_path / "sweep.npz", minilm_dir(), tmp_path / "out", budget_s=600, device="cpu")

    assert summary["winner"] == "x" and set(summary["results"]) == {"x_full", "x_lso"}
    assert json.loads((tmp_path / "out" / "results.json").read_text())["winner"] == "x"
    assert set(np.load(tmp_path / "out" / "scores.npz").files) == {"x_full", "x_lso"}
    joined = tmp_path / "winner.pt"
    joined.write_bytes(b"".join(p.read_bytes() for p in sorted((tmp_path / "out").glob("winner.pt.part*"))))
    net, _ = load_intent_weights(joined, runs["x_full"])
    assert sum(p.numel() for p in net.parameters()) > 0  # type: ignore[attr-defined]


def test_the_sensitive_benign_repeats_name_only_sources_the_run_learns() -> None:
    assert sensitive_repeats(["medquad", "advbench"], 3) == {"medquad": 3}
    assert sensitive_repeats(["medquad", "advbench"], 1) == {}
    configs = configurations()
    assert [c.sensitive_repeats for c in configs.values()] == [1, 1, 1, 1, 1, 1, 3, 6]
    assert set(SENSITIVE_BENIGN) <= set(configs["allb3e1"].sources)

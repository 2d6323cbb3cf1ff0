"""The weight-layout table of the engine bench: distance from the reference computed from log-probabilities, and the
report's rows."""

from __future__ import annotations

import numpy as np
import pytest

from functions.offline.bench.engine.quality import _log_softmax, compare, layout_rows


def test_the_reference_against_itself_is_identical() -> None:
    rng = np.random.default_rng(0)
    reference = [_log_softmax(rng.normal(size=(6, 10)))]
    rows = [[1, 4, 2, 9, 0, 3]]
    same = compare(reference, reference, rows)
    assert same["top1_agreement"] == 1.0 and same["mean_kl_nats"] == pytest.approx(0.0, abs=1e-9)
    assert same["perplexity"] == pytest.approx(same["reference_perplexity"])


def test_a_moved_model_disagrees_diverges_and_is_more_perplexed() -> None:
    reference = [_log_softmax(np.array([[0.0, 4.0, 0.0], [0.0, 0.0, 4.0], [4.0, 0.0, 0.0]]))]
    moved = [_log_softmax(np.array([[0.0, 4.0, 0.0], [0.0, 0.0, 4.0], [0.0, 4.0, 0.0]]))]
    rows = [[0, 1, 2]]  # the text follows the reference: after token 0 comes 1, after 1 comes 2
    result = compare(reference, moved, rows)
    assert result["positions"] == 3 and result["top1_agreement"] == pytest.approx(2 / 3)
    kl = float((np.exp(reference[0][2]) * (reference[0][2] - moved[0][2])).sum()) / 3
    assert result["mean_kl_nats"] == pytest.approx(kl) and kl > 0
    # Only positions 0 and 1 have a next token in the text, and there both models agree.
    assert result["perplexity"] == pytest.approx(result["reference_perplexity"])
    worse = compare(reference, [_log_softmax(np.array([[0.0, 0.0, 4.0]] * 3))], rows)
    assert worse["perplexity"] > worse["reference_perplexity"]


def test_the_report_lists_every_layout_or_says_why_not() -> None:
    row = {
        "size_mb": 145.2,
        "single_tok_s": 120.4,
        "batched_tok_s": None,
        "positions": 1024,
        "top1_agreement": 0.959,
        "mean_kl_nats": 0.0046,
        "reference_perplexity": 29.31,
        "perplexity": 29.41,
    }
    lines = layout_rows({"q8_0": row}, "q8_0")
    assert "| q8_0 | 145 | 120.4 | n/a | 95.9% | 0.0046 | 29.41 |" in lines
    assert "`q8_0` serves" in lines[1] and "1024 positions" in lines[1]
    assert "not measured (ImportError: x)" in layout_rows({"error": "ImportError: x"}, "q8_0")[-1]
    assert layout_rows({}, "q8_0") == []


def test_rows_without_a_file_or_speed_read_not_applicable() -> None:
    row = {"size_mb": None, "single_tok_s": None, "batched_tok_s": None, "positions": 1024}
    row |= {"top1_agreement": 0.9, "mean_kl_nats": 0.05, "reference_perplexity": 29.3, "perplexity": 30.1}
    (line,) = [x for x in layout_rows({"fp8 weights, per-tensor (vLLM)": row}, "q8_0") if x.startswith("| fp8")]
    assert line == "| fp8 weights, per-tensor (vLLM) | n/a | n/a | n/a | 90.0% | 0.0500 | 30.10 |"

"""Ensembles of a source sweep's fine-tunes read from the device's scores: the mean score each is read at, and the
rule that picks one (the benign probes held at the baseline's level)."""

from __future__ import annotations

import numpy as np
import pytest

from functions.offline.safety_training.intent.source_sweep_device import Sweep
from functions.offline.safety_training.intent.sweep_ensembles import (
    EnsembleRead,
    candidates,
    choose_ensemble,
    harmful_at_benign_levels,
    read_ensemble,
)


def _read(members: tuple[str, ...], harmful: float, benign: float, golden: tuple[float, float] = (0.97, 0.01)):
    return EnsembleRead(
        members=members,
        probe_harmful_blocked=harmful,
        probe_benign_blocked={"b1": benign},
        golden_blocked=golden[0],
        golden_refused=golden[1],
    )


def test_the_winner_blocks_the_most_harmful_probes_without_refusing_more_benign_ones_than_the_baseline() -> None:
    reads = [
        _read(("base",), 0.50, 0.05),
        _read(("x",), 0.90, 0.10),  # refuses 5 points more benign probes
        _read(("base", "x"), 0.70, 0.06),  # within the 1-point slack
        _read(("y",), 0.95, 0.00, golden=(0.90, 0.0)),  # fails the golden gate
    ]
    assert choose_ensemble(reads, "base").members == ("base", "x")
    assert [read.eligible for read in reads] == [True, False, True, False]


def test_the_baseline_wins_a_tie_and_when_nothing_else_is_eligible() -> None:
    assert choose_ensemble([_read(("x",), 0.5, 0.05), _read(("base",), 0.5, 0.05)], "base").members == ("base",)
    assert choose_ensemble([_read(("base",), 0.5, 0.05), _read(("x",), 0.9, 0.5)], "base").members == ("base",)


def test_candidates_are_the_mixes_with_both_twins_alone_and_in_pairs() -> None:
    scores = {"a_full": 0, "a_lso": 0, "b_full": 0, "b_lso": 0, "c_full": 0}
    assert candidates(scores) == [("a",), ("b",), ("a", "b")]


def _sweep() -> Sweep:
    """Validation rows of two sources (two of s2's three are benign), one golden pair, one probe source of each
    kind, and 100 hand-written benign validation rows; run a learnt s1, run x s2."""
    sweep = object.__new__(Sweep)
    sweep.meta = {
        "probe_harmful": ["h"],
        "probe_benign": ["b"],
        "runs": {
            name: {"sources": [src]}
            for name, src in [("a_full", "s1"), ("a_lso", "s1"), ("x_full", "s2"), ("x_lso", "s2")]
        },
    }
    sweep.kind = np.asarray(["val", "val", "val", "golden", "golden", "probe", "probe", "val", "val"] + ["val"] * 100)
    sweep.source = np.asarray(["s1", "s1", "s2", "g", "g", "h", "b", "s2", "s2"] + ["hand"] * 100)
    sweep.label = np.asarray([0, 3, 0, 3, 0, 3, 0, 0, 3] + [0] * 100)
    sweep.rows = np.arange(len(sweep.kind))
    return sweep


def test_an_ensemble_is_read_at_its_mean_score_on_the_members_sources_together() -> None:
    sweep = _sweep()
    n = len(sweep.kind)
    a = np.zeros(n, np.float32)
    x = np.zeros(n, np.float32)
    a[[1, 3, 5, 8]] = 1.0  # a blocks the harmful rows
    x[[2, 7, 6]] = 0.9  # x scores s2's benign rows and the benign probe high
    x[[5, 8]] = 0.6
    scores = {"a_full": a, "a_lso": a, "x_full": x, "x_lso": x}
    read = read_ensemble(sweep, scores, ("a", "x"))
    # The mean: harmful probe 0.8, benign probe 0.45, and s2's two benign validation rows 0.45 (2 of 103 benign
    # rows: more than 1 %, so the threshold lies above them): the benign probe passes, the harmful one is blocked.
    assert read.probe_harmful_blocked == pytest.approx(1.0)
    assert read.probe_benign_blocked == {"b": pytest.approx(0.0)}
    assert (read.golden_blocked, read.golden_refused) == (pytest.approx(1.0), pytest.approx(0.0))
    # x alone is read at a threshold above its own benign rows (0.9): its 0.6 on the harmful probe passes.
    assert read_ensemble(sweep, scores, ("x",)).probe_harmful_blocked == pytest.approx(0.0)


def test_calibrated_on_the_baseline_s_sources_a_member_s_unseen_benign_rows_do_not_set_the_threshold() -> None:
    sweep = _sweep()  # run a learnt s1, run x learnt s2
    n = len(sweep.kind)
    a = np.zeros(n, np.float32)
    x = np.zeros(n, np.float32)
    a[[2, 7]] = 0.9  # a never learnt s2 and scores its two benign validation rows high: their mean is 0.45
    a[5], x[5] = 0.6, 0.2  # the harmful probe's mean: 0.4
    scores = {"a_full": a, "a_lso": a, "x_full": x, "x_lso": x}
    # On both members' sources s2's benign rows (2 of 103) set the threshold above 0.45: the probe passes.
    assert read_ensemble(sweep, scores, ("a", "x")).probe_harmful_blocked == pytest.approx(0.0)
    # On a's sources alone every benign row scores 0 and the threshold is the floor (0.05): the probe is blocked.
    assert read_ensemble(sweep, scores, ("a", "x"), calibrate_on="a").probe_harmful_blocked == pytest.approx(1.0)


def test_at_matched_benign_levels_the_threshold_sits_just_above_the_benign_probe_rows_the_level_does_not_allow() -> (
    None
):
    sweep = object.__new__(Sweep)
    sweep.meta = {"probe_harmful": ["h"], "probe_benign": ["b"], "runs": {}}
    sweep.kind = np.asarray(["probe"] * 8)
    sweep.source = np.asarray(["b"] * 4 + ["h"] * 4)
    sweep.label = np.asarray([0] * 4 + [3] * 4)
    x = np.asarray([0.9, 0.5, 0.2, 0.1, 0.95, 0.6, 0.4, 0.3], np.float32)
    scores = {"x_lso": x}
    # A level of 25 % allows one of the four benign rows (0.9): the threshold is just above 0.5, two harmful blocked.
    assert harmful_at_benign_levels(sweep, scores, ("x",), {"b": 0.25}) == pytest.approx(0.5)
    # A level of 0 allows none: just above 0.9, one harmful (0.95) blocked; a level of 1 allows all: every one.
    assert harmful_at_benign_levels(sweep, scores, ("x",), {"b": 0.0}) == pytest.approx(0.25)
    assert harmful_at_benign_levels(sweep, scores, ("x",), {"b": 1.0}) == pytest.approx(1.0)


def test_a_source_cap_holds_a_sensitive_benign_source_that_the_pooled_rule_lets_through() -> None:
    sweep = object.__new__(Sweep)
    sweep.meta = {"probe_harmful": ["h"], "probe_benign": ["b"], "runs": {"a_full": {"sources": ["medquad"]}}}
    sweep.meta["runs"]["a_lso"] = sweep.meta["runs"]["a_full"]
    sweep.kind = np.asarray(["val"] * 104 + ["probe", "probe", "golden", "golden", "val"])
    sweep.source = np.asarray(["medquad"] * 4 + ["hand"] * 100 + ["h", "b", "g", "g", "hand"])
    sweep.label = np.asarray([0] * 104 + [3, 0, 3, 0, 3])
    a = np.ones(109, np.float32)  # the harmful validation row (last) scores 1
    a[:108] = 0.0
    a[0] = 0.9  # one of MedQuAD's four benign rows scores high: 1 of 104 benign rows, within the pooled 1 %
    a[104] = a[106] = 0.5  # the harmful probe and the golden harmful row
    scores = {"a_full": a, "a_lso": a}
    assert read_ensemble(sweep, scores, ("a",)).probe_harmful_blocked == pytest.approx(1.0)
    # Capped at 4 %, none of MedQuAD's four rows may be blocked: the threshold rises above 0.9, past the probe.
    assert read_ensemble(sweep, scores, ("a",), source_cap=0.04).probe_harmful_blocked == pytest.approx(0.0)

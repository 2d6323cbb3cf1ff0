"""Ensembles of a source sweep's fine-tunes, read on its probes from the per-row scores the device sent back: no
training, seconds on a CPU.

An ensemble's score is the mean P(harmful) of its members (as `fleetchat safety ensemble` serves it). Each candidate
(every single mix, and every pair) is read like a sweep configuration (`source_sweep_device.py`): its
leave-sources-out twins' mean on the probes, at the threshold that blocks 1 % of the validation benign rows of the
members' sources together; its full twins' mean on the golden sets.

The rule, declared on 2026-11-28 before any ensemble was read (after r17, an ensemble of the shipped second stage and
r15's, had been read once on the held-out sources; docs/safety.md): eligible are candidates whose full twins pass the
golden gate and whose leave-sources-out twins block each benign probe source at most BENIGN_SLACK more than the
baseline mix alone does; the eligible one that blocks the most of the harmful probe sources (their mean) wins, the
baseline alone winning ties.

`--calibrate-on baseline` sets every candidate's threshold on the validation rows of the baseline mix's sources
instead, as a served ensemble with the shipped model as a member is recalibrated on the shipped split (r17, r19,
r20): read on the members' sources together, the baseline's member pays for benign sources it never learnt.

Each line also shows the harmful probes a candidate blocks at its own matched operating point: the lowest threshold
at which its leave-sources-out twins block no more of any benign probe source than the baseline alone does. That
separates a better trade-off curve from a move along the same one, which is all a different calibration makes.

`--source-cap SHARE` adds the per-source rule of `IntentConfig.source_cap` to every candidate's calibration.

Run: `python -m functions.offline.safety_training.intent.sweep_ensembles SWEEP.npz SCORES.npz --baseline r7e1
[--calibrate-on baseline] [--source-cap SHARE]` (the sweep's data file, built again by `source_sweep.py`, and the
device's scores.npz; the 2026-11-28 run's is in gpu_runs/)."""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from functions.offline.safety_training.intent.source_sweep_device import GOLDEN_MAX_REFUSED, GOLDEN_MIN_BLOCKED, Sweep

BENIGN_SLACK = 0.01  # how much more of a benign probe source an ensemble may block than the baseline alone


class EnsembleRead(BaseModel):
    members: tuple[str, ...]
    probe_harmful_blocked: float  # mean over the harmful probe sources (leave-sources-out twins)
    probe_benign_blocked: dict[str, float]  # per benign probe source (leave-sources-out twins)
    golden_blocked: float  # full twins
    golden_refused: float
    eligible: bool = False


def read_ensemble(
    sweep: Sweep,
    scores: Any,
    members: tuple[str, ...],
    calibrate_on: str | None = None,
    source_cap: float | None = None,
) -> EnsembleRead:
    """The members' mean score, read on the probes (leave-sources-out twins) and the golden sets (full twins), at
    the threshold set on the validation rows of the members' sources together, or of mix `calibrate_on`'s (with
    `source_cap`, each sensitive benign source's held at that share too)."""
    reads = {}
    for twin in ("full", "lso"):
        runs = [f"{member}_{twin}" for member in members]
        calibration_runs = [f"{calibrate_on}_{twin}"] if calibrate_on else runs
        sources = sorted(set().union(*(sweep.meta["runs"][run]["sources"] for run in calibration_runs)))
        reads[twin] = sweep.metrics_on(sources, np.mean([scores[run] for run in runs], axis=0), source_cap)
    probes = reads["lso"]["probes"]
    return EnsembleRead(
        members=members,
        probe_harmful_blocked=float(np.mean([probes[s]["harmful_blocked"] for s in sweep.meta["probe_harmful"]])),
        probe_benign_blocked={s: probes[s]["benign_blocked"] for s in sweep.meta["probe_benign"]},
        golden_blocked=reads["full"]["golden_blocked"],
        golden_refused=reads["full"]["golden_refused"],
    )


def harmful_at_benign_levels(sweep: Sweep, scores: Any, members: tuple[str, ...], levels: dict[str, float]) -> float:
    """The harmful probes (mean over their sources) the members' mean score blocks (leave-sources-out twins) at the
    lowest threshold blocking no more of each benign probe source than `levels` gives it."""
    mean = np.mean([scores[f"{member}_lso"] for member in members], axis=0)
    threshold = 0.0
    for source, level in levels.items():
        rows = (sweep.kind == "probe") & (sweep.source == source) & (sweep.label == 0)
        benign = np.sort(mean[rows])[::-1]
        allowed = int(np.floor(level * benign.size + 1e-9))  # blocked rows the level allows
        if allowed < benign.size:
            threshold = max(threshold, float(np.nextafter(benign[allowed], np.float32(np.inf))))
    blocked = [
        (mean[(sweep.kind == "probe") & (sweep.source == source) & (sweep.label != 0)] >= threshold).mean()
        for source in sweep.meta["probe_harmful"]
    ]
    return float(np.mean(blocked))


def choose_ensemble(reads: list[EnsembleRead], baseline: str) -> EnsembleRead:
    """Mark the eligible reads and return the winner (the rule in the module docstring)."""
    base = next(read for read in reads if read.members == (baseline,))
    for read in reads:
        read.eligible = (
            read.golden_blocked >= GOLDEN_MIN_BLOCKED
            and read.golden_refused <= GOLDEN_MAX_REFUSED
            and all(
                blocked <= base.probe_benign_blocked[source] + BENIGN_SLACK + 1e-9
                for source, blocked in read.probe_benign_blocked.items()
            )
        )
    eligible = [read for read in reads if read.eligible] or [base]
    return max(eligible, key=lambda read: (read.probe_harmful_blocked, read.members == (baseline,)))


def candidates(scores: Any) -> list[tuple[str, ...]]:
    """Every mix with both twins scored, alone and in pairs."""
    fulls = [name.removesuffix("_full") for name in scores if name.endswith("_full")]
    mixes = [mix for mix in fulls if f"{mix}_lso" in scores]
    return [(mix,) for mix in mixes] + list(itertools.combinations(mixes, 2))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="the sweep's data file (`source_sweep.py`)")
    parser.add_argument("scores", type=Path, help="the device's scores.npz")
    parser.add_argument("--baseline", required=True, help="the shipped model's mix (e.g. r7e1)")
    parser.add_argument(
        "--calibrate-on",
        choices=("members", "baseline"),
        default="members",
        help="whose sources' validation rows set each candidate's threshold",
    )
    parser.add_argument(
        "--source-cap", type=float, help="also hold each sensitive benign source's validation rows at this share"
    )
    args = parser.parse_args(argv)
    sweep = Sweep(args.data, "cpu")
    scores = dict(np.load(args.scores))
    calibrate_on = args.baseline if args.calibrate_on == "baseline" else None
    reads = [read_ensemble(sweep, scores, members, calibrate_on, args.source_cap) for members in candidates(scores)]
    winner = choose_ensemble(reads, args.baseline)
    levels = next(read for read in reads if read.members == (args.baseline,)).probe_benign_blocked
    for read in reads:
        benign = " ".join(f"{s} {100 * b:.1f}" for s, b in read.probe_benign_blocked.items())
        matched = harmful_at_benign_levels(sweep, scores, read.members, levels)
        print(
            f"{'+'.join(read.members):<14} harmful probes {100 * read.probe_harmful_blocked:5.1f} | {benign} | "
            f"golden {100 * read.golden_blocked:.1f}/{100 * read.golden_refused:.1f} | "
            f"at the baseline's benign levels: harmful {100 * matched:5.1f}" + (" eligible" if read.eligible else "")
        )
    print(json.dumps({"winner": winner.members}))


if __name__ == "__main__":
    main()

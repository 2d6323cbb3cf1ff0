"""The device side of a source sweep (`source_sweep.py`): numpy and torch only, for a GPU machine without the
project's other dependencies. Trains each run of the data file (in its order, until the time budget is spent),
scores the evaluation rows, picks the winner and writes results.json, scores.npz and the winner's fp16 weights (in
15 MiB parts, for machines that send files back in pieces) to the output directory.

The winner, by a rule fixed before any sweep was run: for each configuration with both twins trained,
J = mean blocked share of the probe harmful sources - 3 x mean blocked share of the probe benign sources, both read
from the leave-sources-out twin at its own threshold (the lowest that blocks at most 1 % of its validation split's
benign rows). Eligible: the full twin passes the golden gate at its own threshold (adversarial >= 95 % blocked,
benign <= 3 %). The eligible configuration with the highest J wins (with none eligible, the highest J, flagged).
Its full twin's weights are the ones written (`fleetchat safety train --intent-weights` takes them, joined).

Run: `python -m functions.offline.safety_training.intent.source_sweep_device DATA.npz --base MINILM_DIR --out DIR
--budget-s 330`."""

from __future__ import annotations

import argparse
import io
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from functions.offline.safety_training.intent.intent_fine_tune import fine_tune_arrays
from functions.offline.safety_training.thresholds import (
    SECOND_STAGE_MAX_VALIDATION_FALSE_POSITIVE,
    choose_threshold,
    sensitive_benign_rows,
    source_capped_threshold,
)

PART_BYTES = 15 * 1024 * 1024
FPR_WEIGHT = 3.0
GOLDEN_MIN_BLOCKED, GOLDEN_MAX_REFUSED = 0.95, 0.03


class Sweep:
    def __init__(self, data: Path, device: str) -> None:
        d = np.load(data)
        self.arrays = d
        self.meta = json.loads(str(d["meta"]))
        self.ids = d["ids"].astype(np.int64)
        self.lengths = d["mask_len"].astype(np.int64)
        self.mask = (np.arange(self.ids.shape[1])[None, :] < self.lengths[:, None]).astype(np.int64)
        self.rows, self.label = d["eval.rows"], d["eval.label"].astype(np.int64)
        self.source, self.kind = d["eval.source"], d["eval.kind"]
        self.device = device

    def train(self, name: str, base: Path) -> Any:
        settings = self.meta["runs"][name]
        rows = self.arrays[f"{name}.rows"]
        return fine_tune_arrays(
            base,
            self.ids[rows],
            self.mask[rows],
            self.arrays[f"{name}.targets"],
            self.arrays[f"{name}.categories"].astype(np.int64),
            layers=settings["layers"],
            epochs=settings["epochs"],
            classes=settings["classes"],
            seed=settings["seed"],
            device=self.device,
        )

    def score(self, net: Any) -> np.ndarray:
        """P(harmful) of every evaluation row, read whole (its last tokens, as the second stage reads a short ask)."""
        import torch

        net = net.to(self.device).eval()
        out = np.zeros(len(self.rows), np.float32)
        order = np.argsort(self.lengths[self.rows])
        with torch.no_grad():
            for start in range(0, len(order), 512):
                chunk = order[start : start + 512]
                rows = self.rows[chunk]
                width = int(self.lengths[rows].max())
                ids = torch.from_numpy(self.ids[rows, :width]).to(self.device)
                mask = torch.from_numpy(self.mask[rows, :width]).to(self.device)
                out[chunk] = net(ids, mask)[0].float().cpu().numpy()
        net.to("cpu")
        return out

    def metrics(self, name: str, scores: np.ndarray) -> dict[str, Any]:
        return self.metrics_on(self.meta["runs"][name]["sources"], scores)

    def metrics_on(self, sources: list[str], scores: np.ndarray, source_cap: float | None = None) -> dict[str, Any]:
        """Scores of every evaluation row read at their threshold on the validation rows of `sources` (and the
        hand-written ones; with `source_cap`, each sensitive benign source's held at that share too, as
        `IntentConfig.source_cap` calibrates): validation recall, the golden gate, each probe source's blocked share."""
        validation = (self.kind == "val") & np.isin(self.source, [*sources, "hand"])
        threshold = threshold_at(scores[validation & (self.label == 0)])
        if source_cap is not None:
            sensitive = sensitive_benign_rows(self.source, validation & (self.label == 0))
            threshold = max(threshold, source_capped_threshold(scores, sensitive, source_cap))
        blocked = scores >= threshold
        golden = self.kind == "golden"
        probes = {}
        for source in self.meta["probe_harmful"] + self.meta["probe_benign"]:
            rows = (self.kind == "probe") & (self.source == source)
            harmful = self.label[rows] != 0
            probes[source] = {
                "trained_on": source in sources,
                "rows": int(rows.sum()),
                "harmful_blocked": float(blocked[rows][harmful].mean()) if harmful.any() else None,
                "benign_blocked": float(blocked[rows][~harmful].mean()) if (~harmful).any() else None,
            }
        return {
            "threshold": threshold,
            "validation_recall": float(blocked[validation & (self.label != 0)].mean()),
            "golden_blocked": float(blocked[golden & (self.label != 0)].mean()),
            "golden_refused": float(blocked[golden & (self.label == 0)].mean()),
            "probes": probes,
        }


def threshold_at(benign_scores: np.ndarray) -> float:
    """The second stage's rule (`choose_threshold` at SECOND_STAGE_MAX_VALIDATION_FALSE_POSITIVE) on these benign
    scores."""
    labels = np.zeros(len(benign_scores), np.int64)
    return choose_threshold(benign_scores, labels, SECOND_STAGE_MAX_VALIDATION_FALSE_POSITIVE)


def choose(results: dict[str, dict[str, Any]], configs: list[str], meta: dict[str, Any]) -> dict[str, Any]:
    """Each configuration's J and eligibility, and the winner (the rule in the module docstring)."""
    scored = {}
    for config in configs:
        full, lso = results.get(f"{config}_full"), results.get(f"{config}_lso")
        if not (full and lso):
            continue
        recall = float(np.mean([lso["probes"][s]["harmful_blocked"] for s in meta["probe_harmful"]]))
        refused = float(np.mean([lso["probes"][s]["benign_blocked"] for s in meta["probe_benign"]]))
        scored[config] = {
            "J": recall - FPR_WEIGHT * refused,
            "probe_harmful_blocked": recall,
            "probe_benign_blocked": refused,
            "eligible": full["golden_blocked"] >= GOLDEN_MIN_BLOCKED and full["golden_refused"] <= GOLDEN_MAX_REFUSED,
        }
    eligible = {c: v for c, v in scored.items() if v["eligible"]}
    pool = eligible or scored
    winner = max(pool, key=lambda c: pool[c]["J"]) if pool else None
    return {"configs": scored, "winner": winner, "winner_eligible": bool(eligible)}


def run(data: Path, base: Path, out: Path, budget_s: float, device: str) -> dict[str, Any]:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    out.mkdir(parents=True, exist_ok=True)
    sweep = Sweep(data, device)
    started = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    scores: dict[str, np.ndarray] = {}
    weights: dict[str, dict[str, Any]] = {}
    for name in [f"{c}_{twin}" for c in sweep.meta["configs"] for twin in ("full", "lso")]:
        if time.monotonic() - started > budget_s:
            print(f"time budget spent before {name}", flush=True)
            break
        began = time.monotonic()
        net = sweep.train(name, base)
        trained_s = time.monotonic() - began
        scores[name] = sweep.score(net)
        results[name] = sweep.metrics(name, scores[name]) | {"train_s": round(trained_s, 1)}
        if name.endswith("_full"):
            state = net.state_dict()
            weights[name] = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}
        print(name, json.dumps(results[name]), flush=True)
    summary = {"results": results, **choose(results, sweep.meta["configs"], sweep.meta), "device": device}
    summary["seconds"] = round(time.monotonic() - started, 1)
    (out / "results.json").write_text(json.dumps(summary, indent=1) + "\n")
    np.savez_compressed(out / "scores.npz", **scores)
    if summary["winner"]:
        name = f"{summary['winner']}_full"
        buffer = io.BytesIO()
        torch.save({"state_dict": weights[name], "settings": sweep.meta["runs"][name]}, buffer)
        blob = buffer.getvalue()
        for k in range(0, len(blob), PART_BYTES):
            (out / f"winner.pt.part{k // PART_BYTES}").write_bytes(blob[k : k + PART_BYTES])
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="the file `source_sweep.py` wrote")
    parser.add_argument("--base", type=Path, required=True, help="directory of all-MiniLM-L6-v2 (config, weights)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=330.0, help="start no run after this many seconds")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    summary = run(args.data, args.base, args.out, args.budget_s, args.device)
    print(json.dumps({"winner": summary["winner"], "configs": summary["configs"]}))


if __name__ == "__main__":
    main()

"""The transformer stages' fine-tuning loop on token arrays: numpy, torch and transformers only, so that it also runs
on a GPU machine that has none of the project's other dependencies.

`train_intent.fine_tune` tokenises and calls `fine_tune_arrays` on the CPU; `fleetchat safety train
--export-intent-data F.npz` writes the second stage's training arrays to one .npz file, and on a machine with a GPU

    python -m functions.offline.safety_training.intent.intent_fine_tune DATA.npz --base MINILM_DIR --out WEIGHTS.pt
    --device cuda

fine-tunes on them with the same loop, the same hyper-parameters and seeds; `fleetchat safety train
--intent-weights WEIGHTS.pt` (the same options) exports and calibrates the result as if it had fine-tuned here.
Deterministic on the CPU for a given data set and seed; on a GPU, up to its kernels' rounding."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

BATCH = 16
LEARNING_RATE = 5e-5
# The category head is a linear probe on the (detached) pooled vector: it learns at a linear model's pace.
PROBE_LEARNING_RATE = 3e-3
CATEGORY_LOSS_WEIGHT = 0.5
IGNORED = -100  # a category target that trains nothing (cross_entropy's ignore_index)
# An arrays file (`save_arrays`) holds each distinct text once, as token ids and attention mask right-padded to one
# width ("ids", "mask"), and one or more named runs: the rows a run learns from, in order, with repeats ("NAME.rows"),
# their P(harmful) and category targets ("NAME.targets", "NAME.categories"), and the run's settings (layers, epochs,
# soup, seed, classes, and whatever else the writer records) as JSON under "settings".


def load_base(base_dir: Path, layers: int) -> Any:
    """MiniLM from `base_dir` with only its bottom `layers` layers, in float32."""
    from transformers import AutoModel

    base = AutoModel.from_pretrained(base_dir).float()
    base.encoder.layer = base.encoder.layer[:layers]
    base.config.num_hidden_layers = layers
    return base


def fine_tune_arrays(
    base_dir: Path,
    ids: np.ndarray,
    mask: np.ndarray,
    targets: np.ndarray,
    categories: np.ndarray,
    *,
    layers: int,
    epochs: int,
    classes: int,
    seed: int,
    device: str = "cpu",
    on_step: Callable[[], None] | None = None,
) -> Any:
    """MiniLM's bottom `layers` layers tuned to P(harmful) = `targets` (a label or a teacher's probability) per row of
    `ids`/`mask`, with the category probe on `categories` (IGNORED: no category for that row). Returns the net in eval
    mode on the CPU."""
    import torch

    from functions.offline.safety_training.intent.intent_net import IntentNet

    torch.manual_seed(seed)
    net = IntentNet(load_base(base_dir, layers), classes).to(device)
    steps = epochs * ((len(ids) + BATCH - 1) // BATCH)
    probe = list(net.categories.parameters())
    tuned = [p for p in net.parameters() if all(p is not q for q in probe)]
    groups = [{"params": tuned, "lr": LEARNING_RATE}, {"params": probe, "lr": PROBE_LEARNING_RATE}]
    optimiser = torch.optim.AdamW(groups, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimiser,
        max_lr=[LEARNING_RATE, PROBE_LEARNING_RATE],
        total_steps=steps,
        pct_start=0.1,
        anneal_strategy="linear",
    )
    rng = np.random.default_rng(seed)
    all_ids, all_mask = torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(mask.astype(np.int64))
    all_targets = torch.from_numpy(targets.astype(np.float32))
    all_categories = torch.from_numpy(categories.astype(np.int64))
    net.train()
    for _ in range(epochs):
        order = rng.permutation(len(ids))
        for start in range(0, len(order), BATCH):
            rows = torch.from_numpy(order[start : start + BATCH])
            width = int(all_mask[rows].sum(1).max())  # each batch padded to its longest row, as the tokenizer pads
            batch_ids, batch_mask = all_ids[rows, :width].to(device), all_mask[rows, :width].to(device)
            harmful, categories_logits = net.logits(batch_ids, batch_mask)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(harmful, all_targets[rows].to(device))
            category = all_categories[rows].to(device)
            if bool((category != IGNORED).any()):
                category_loss = torch.nn.functional.cross_entropy(categories_logits, category, ignore_index=IGNORED)
                loss = loss + CATEGORY_LOSS_WEIGHT * category_loss
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            if on_step is not None:
                on_step()
    return net.to("cpu").eval()


def average_weights(nets: list) -> Any:
    """The first net, its floating-point weights replaced by the mean over `nets` (integer buffers kept)."""
    import torch

    states = [net.state_dict() for net in nets]
    mean = {
        name: torch.stack([s[name] for s in states]).mean(0) if value.is_floating_point() else value
        for name, value in states[0].items()
    }
    nets[0].load_state_dict(mean)
    return nets[0]


def pad_rows(rows: list[list[int]], width: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, mask) as int32, right-padded with 0 to `width`."""
    ids = np.zeros((len(rows), width), np.int32)
    mask = np.zeros((len(rows), width), np.int32)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row[:width]
        mask[i, : min(len(row), width)] = 1
    return ids, mask


class TrainingRun(NamedTuple):
    rows: np.ndarray  # indices into the file's ids/mask
    targets: np.ndarray
    categories: np.ndarray
    settings: dict[str, Any]


def save_arrays(path: Path, ids: np.ndarray, mask: np.ndarray, runs: dict[str, TrainingRun]) -> None:
    """One compressed .npz holding the token table and every run (see the file format above)."""
    arrays: dict[str, np.ndarray] = {"ids": ids, "mask": mask}
    for name, run in runs.items():
        if "." in name:
            raise ValueError(f"a run's name cannot hold '.': {name}")
        if not (len(run.rows) == len(run.targets) == len(run.categories)):
            raise ValueError(f"run {name}: rows, targets and categories differ in length")
        arrays |= {f"{name}.rows": run.rows, f"{name}.targets": run.targets, f"{name}.categories": run.categories}
    settings = {name: run.settings for name, run in runs.items()}
    np.savez_compressed(path, **arrays, settings=np.asarray(json.dumps(settings)))


def load_arrays(path: Path) -> tuple[np.ndarray, np.ndarray, dict[str, TrainingRun]]:
    """(ids, mask, runs by name) of an arrays file."""
    with np.load(path) as data:
        settings = json.loads(str(data["settings"]))
        runs = {
            name: TrainingRun(data[f"{name}.rows"], data[f"{name}.targets"], data[f"{name}.categories"], values)
            for name, values in settings.items()
        }
        return data["ids"], data["mask"], runs


def fine_tune_run(
    ids: np.ndarray,
    mask: np.ndarray,
    run: TrainingRun,
    base_dir: Path,
    device: str,
    on_step: Callable[[], None] | None = None,
) -> Any:
    """The soup of `soup` fine-tunes (seeds seed, seed + 1, ...) of one run, averaged."""
    settings = run.settings
    nets = [
        fine_tune_arrays(
            base_dir,
            ids[run.rows],
            mask[run.rows],
            run.targets,
            run.categories,
            layers=settings["layers"],
            epochs=settings["epochs"],
            classes=settings["classes"],
            seed=settings["seed"] + k,
            device=device,
            on_step=on_step,
        )
        for k in range(settings["soup"])
    ]
    return average_weights(nets)


def save_weights(net: Any, settings: dict[str, Any], out: Path) -> None:
    """The fine-tuned state dict with the settings of the run that made it (`train --intent-weights` checks them)."""
    import torch

    torch.save({"state_dict": net.state_dict(), "settings": settings}, out)


def fine_tune_file(data: Path, name: str, base_dir: Path, out: Path, device: str) -> dict[str, Any]:
    """Fine-tune run `name` of an arrays file and save its weights to `out`; what ran (settings, rows, seconds)."""
    started = time.monotonic()
    ids, mask, runs = load_arrays(data)
    if name not in runs:
        raise SystemExit(f"{data} holds no run {name!r} (it holds: {', '.join(runs)})")
    run = runs[name]
    save_weights(fine_tune_run(ids, mask, run, base_dir, device), run.settings, out)
    return {"run": name, "rows": len(run.rows), "device": device, "seconds": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="arrays file from `fleetchat safety train --export-intent-data`")
    parser.add_argument("--base", type=Path, required=True, help="directory of all-MiniLM-L6-v2 (config, weights)")
    parser.add_argument("--run", default="main", help="which run of the file to train (default: main)")
    parser.add_argument("--out", type=Path, required=True, help="where the fine-tuned weights are written")
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1, ...")
    args = parser.parse_args(argv)
    print(json.dumps(fine_tune_file(args.data, args.run, args.base, args.out, args.device)), flush=True)


if __name__ == "__main__":
    main()

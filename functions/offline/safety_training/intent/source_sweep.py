"""Which public training sources (and how many epochs) make the second stage read asks it was not trained on: the
data file of a source sweep, run on a GPU machine by `source_sweep_device.py`.

Every configuration (a mix of sources and a number of epochs) is trained twice: on its whole mix ("full", the model
that would ship) and without the probe sources ("lso", leave sources out). The probes are trained-on sources, never
the held-out ones that `fleetchat eval safety` gates on: harmful asks in shapes the templated sets lack
(Do-Not-Answer, its self-harm asks, CatQA, hh-rlhf red-team asks in users' own words) and benign asks near the line
or ordinary (CoCoNot's contrast set, Arena-Hard). The lso twin's reading of them, at its own threshold, is the
sweep's yardstick; how the winner is picked is declared in `source_sweep_device.py`.

Run: `python -m functions.offline.safety_training.intent.source_sweep OUT.npz` (a few minutes on 2 cores); the file
holds each distinct text once as token ids, each run's rows and settings (as `train --export-intent-data` would write
them), and the evaluation rows: the validation split of every source, every row of the probe sources, and the golden
sets."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import NamedTuple

import numpy as np

from functions.offline.safety_training.intent.intent_fine_tune import TrainingRun, pad_rows
from functions.offline.safety_training.intent.train_intent import (
    IntentConfig,
    intent_run_settings,
    intent_training_examples,
    neutral_conversation,
    neutral_messages,
)
from functions.offline.safety_training.labelled_data import (
    SEED,
    LabelledConversation,
    PublicExample,
    golden_adversarial,
    golden_benign,
    split,
    training_set,
)
from functions.offline.safety_training.sources.public_sources import trained_request_sources
from functions.offline.safety_training.sources.sensitive_benign_sources import SENSITIVE_BENIGN
from functions.safety.categories import CLASSIFIER_LABELS
from functions.safety.classifier.intent_model import IntentEncoder
from functions.safety.classifier.token_table import MODEL_DIR

PROBE_HARMFUL = ("do-not-answer", "do-not-answer-self-harm", "catqa", "hh-red-team-asks")
PROBE_BENIGN = ("coconot-contrast", "arena-hard")
RED_TEAM = frozenset({"hh-red-team-asks", "cona-hate-asks", "malicious-instructions"})
MLCOMMONS = frozenset({"ailuminate-demo", "mlc-v05-hazards"})
SAFEBENCH = frozenset({"safebench"})


class SweepConfig(NamedTuple):
    sources: list[str]
    epochs: int
    sensitive_repeats: int = 1  # how many times each SENSITIVE_BENIGN example is learnt


def configurations() -> dict[str, SweepConfig]:
    """name -> configuration, in the order the device trains them (it stops when its time is spent). r7 is the
    shipped model's mix of 2026-11-25; "all" is every trained-on source. The 2026-11-28 sweep ran the first six;
    the "allb" ones (every source, the sensitive benign ones learnt 3 or 6 times) were added after it."""
    every = trained_request_sources()
    r7 = [s for s in every if s not in RED_TEAM | MLCOMMONS | SAFEBENCH]
    safebench = [s for s in every if s not in RED_TEAM | MLCOMMONS]
    mlcommons = [s for s in every if s not in RED_TEAM | SAFEBENCH]
    return {
        "r7e1": SweepConfig(r7, 1),
        "sbe1": SweepConfig(safebench, 1),
        "alle1": SweepConfig(every, 1),
        "r13e1": SweepConfig(mlcommons, 1),
        "alle3": SweepConfig(every, 3),
        "sbe3": SweepConfig(safebench, 3),
        "allb3e1": SweepConfig(every, 1, 3),
        "allb6e1": SweepConfig(every, 1, 6),
    }


def sensitive_repeats(learnt: list[str], times: int) -> dict[str, int]:
    """The `--repeat` of a run that learns `learnt`: each of its SENSITIVE_BENIGN sources `times` times."""
    return {source: times for source in SENSITIVE_BENIGN if source in learnt} if times > 1 else {}


def _source(item: LabelledConversation) -> str:
    return item.source if isinstance(item, PublicExample) else "hand"


def build(out: Path, seed: int = SEED) -> dict[str, int]:
    """Write the sweep's data file; the numbers of distinct texts, runs and evaluation rows."""
    encoder = IntentEncoder.load(MODEL_DIR, IntentConfig().max_tokens)
    index: dict[str, int] = {}

    def rows_of(texts: list[str]) -> np.ndarray:
        return np.asarray([index.setdefault(t, len(index)) for t in texts], np.int32)

    probes = set(PROBE_HARMFUL) | set(PROBE_BENIGN)
    runs: dict[str, TrainingRun] = {}
    for name, (sources, epochs, times) in configurations().items():
        for twin, learnt in (("full", sources), ("lso", [s for s in sources if s not in probes])):
            config = IntentConfig(epochs=epochs, soup=1, repeats=sensitive_repeats(learnt, times))
            splits = split(training_set(public_sources=learnt))
            texts, targets = intent_training_examples(splits, MODEL_DIR, seed=seed, config=config)
            settings = intent_run_settings(config, seed, learnt)
            runs[f"{name}_{twin}"] = TrainingRun(rows_of(texts), (targets != 0).astype(np.float32), targets, settings)
    every = training_set(public_sources=trained_request_sources())
    evaluation = [(item, "val") for item in split(every)[1]] + [(i, "probe") for i in every if _source(i) in probes]
    texts = [neutral_conversation(item).whole for item, _ in evaluation]
    labels = [CLASSIFIER_LABELS.index(item.label) for item, _ in evaluation]
    sources = [_source(item) for item, _ in evaluation]
    kinds = [kind for _, kind in evaluation]
    for golden, label in ((golden_adversarial(), 1), (golden_benign(), 0)):
        texts += [neutral_messages(g.messages).whole for g in golden]
        labels += [label] * len(golden)
        sources += ["golden"] * len(golden)
        kinds += ["golden"] * len(golden)
    evaluation_rows = rows_of(texts)
    ids, mask = pad_rows([encoder.ids(t) for t in sorted(index, key=index.__getitem__)], encoder.max_tokens)
    arrays: dict[str, np.ndarray] = {"ids": ids.astype(np.int16), "mask_len": mask.sum(1).astype(np.int16)}
    for name, run in runs.items():
        arrays |= {
            f"{name}.rows": run.rows,
            f"{name}.targets": run.targets,
            f"{name}.categories": run.categories.astype(np.int8),
        }
    arrays |= {
        "eval.rows": evaluation_rows,
        "eval.label": np.asarray(labels, np.int8),
        "eval.source": np.asarray(sources),
        "eval.kind": np.asarray(kinds),
    }
    meta = {
        "runs": {name: run.settings for name, run in runs.items()},
        "configs": list(configurations()),
        "probe_harmful": list(PROBE_HARMFUL),
        "probe_benign": list(PROBE_BENIGN),
    }
    np.savez_compressed(out, **arrays, meta=np.asarray(json.dumps(meta)))
    return {"texts": len(index), "runs": len(runs), "evaluation rows": len(evaluation_rows)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the data file to write (.npz)")
    args = parser.parse_args(argv)
    print(json.dumps(build(args.out)))


if __name__ == "__main__":
    main()

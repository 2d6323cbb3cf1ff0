"""HarmBench's classifier validation set as a training source of the output check: 602 answers of many models (Llama
2, Vicuna, Mistral, Orca 2, Baichuan 2, GPT-4, ...) to HarmBench behaviours under ten attacks (PAP, GBDA, TAP,
AutoDAN, PAIR, GCG, ...), each labelled by three people as an instance of the behaviour or not. An answer is harmful
when at least two of them say so; it then takes its behaviour's semantic category, and the answers to copyright and
misinformation behaviours are left out (not in this policy). An answer the people judged no instance (a refusal, a
deflection, a harmless answer) is benign. MIT (HarmBench). HarmBench's repository cannot be fetched here; the copy read
is in a repository that states no licence of its own, and its SHA-256 (e740727b...) is the one other projects pin for
HarmBench's `data/classifier_val_sets/text_behaviors_val_set.json`. Trained on."""

from __future__ import annotations

import json
from collections.abc import Iterator

from functions.offline.safety_training.sources.public_source_model import (
    Kind,
    PublicSource,
    RawRow,
    Use,
    assistant,
    csv_rows,
)
from functions.safety.categories import BENIGN, Category

REPO = "iNLP-Lab/Safety-Paradox"
COMMIT = "e80b52c47adcfd35d6551ffd63411c589cac51b6"
ANSWERS = "Judgement_Ability/data/text_behaviors_val_set.json"
BEHAVIOURS = "Judgement_Ability/data/harmbench_behaviors_text_all.csv"
RATERS = ("human_0", "human_1", "human_2")
# HarmBench's semantic categories in this policy (its request source uses them too); copyright and misinformation are
# not in it.
HARMBENCH_CATEGORIES: dict[str | None, str] = {
    "illegal": Category.ILLICIT,
    "cybercrime_intrusion": Category.ILLICIT,
    "chemical_biological": Category.ILLICIT_VIOLENT,
    "harmful": Category.VIOLENCE,
    "harassment_bullying": Category.HARASSMENT,
}


def read_harmbench_answers(files: dict[str, bytes]) -> Iterator[RawRow]:
    """Each answer with "harmful/<its behaviour's semantic category>" (two or three raters: an instance) or
    "benign"."""
    category = {row["BehaviorID"]: row["SemanticCategory"] for row in csv_rows(files[BEHAVIOURS])}
    for behaviour, answers in json.loads(files[ANSWERS]).items():
        for answer in answers:
            if not answer["generation"].strip():
                continue
            harmful = sum(int(answer[rater]) for rater in RATERS) >= 2
            # Three behaviours of the set have since been renamed in the behaviour file: their harmful answers have
            # no category here and are dropped with the out-of-policy ones.
            yield assistant(answer["generation"]), f"harmful/{category.get(behaviour)}" if harmful else "benign"


HARMBENCH_ANSWERS_SOURCE = PublicSource(
    name="harmbench-val-answers",
    repo=REPO,
    commit=COMMIT,
    paths=(ANSWERS, BEHAVIOURS),
    license="MIT (HarmBench; the copy's repository states none)",
    origin="HarmBench's classifier validation set (Mazeika et al. 2024, centerforaisafety/HarmBench): models' answers "
    "to its behaviours under attack, labelled by three people; copied in iNLP-Lab/Safety-Paradox",
    use=Use.TRAIN,
    harmful=None,
    kind=Kind.RESPONSE,
    reader=read_harmbench_answers,
    categories={BENIGN: BENIGN, **{f"harmful/{k}": v for k, v in HARMBENCH_CATEGORIES.items()}},
)

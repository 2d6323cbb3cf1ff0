"""MLCommons' hazard prompt sets as training sources: AILuminate v1.0's public demo prompts (hazardous asks in many
voices, skilled and unskilled personas) and the AI Safety v0.5 benchmark's test items (short asks and statements
from malicious and vulnerable users, each hazard with its typical users' safe counterparts, such as "there is
nothing wrong with suicide" beside "there is a lot wrong with suicide"). Both CC BY 4.0. Trained on.

The v0.5 items are built from templates over many hazard phrases, and one hazard (hate) holds 26,530 of them: each
file is capped at a fixed sample chosen by each text's hash, so no hazard or template dominates."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

from functions.offline.safety_training.sources.public_source_model import (
    TEACHER,
    PublicSource,
    RawRow,
    Use,
    sample_order,
    user,
)
from functions.safety.categories import BENIGN, Category

AILUMINATE_REPO = "mlcommons/ailuminate"
AILUMINATE_COMMIT = "769cc2be9d20c8d4fb26ce53b68865ed41dfb8e2"
MOONSHOT_REPO = "aiverify-foundation/moonshot-data"
MOONSHOT_COMMIT = "30fac12375476ac1eb9f47e5872ea5d379c1aa4c"

# AILuminate's hazards in this policy. Left out: intellectual property and defamation (not in this policy) and the
# specialised-advice hazards (spc_*: elections, finance, health, legal), whose prompts ask for advice this service
# gives.
AILUMINATE_CATEGORIES: dict[str | None, str] = {
    "vcr": Category.VIOLENCE,
    "src": Category.SEXUAL,
    "cse": Category.SEXUAL_MINORS,
    "ssh": Category.SELF_HARM,
    "iwp": Category.ILLICIT_VIOLENT,
    "ncr": Category.ILLICIT,
    "hte": Category.HATE,
    "prv": TEACHER,
    "sxc_prn": Category.SEXUAL,
}

# v0.5's hazards: child sexual exploitation, chemical/biological/radiological weapons, hate, non-violent crimes,
# sex-related crimes, suicide and self-harm, violent crimes.
V05_HAZARDS: dict[str, tuple[str, str]] = {
    # hazard: (the file of its unsafe asks, our category)
    "cae": ("malicious", Category.SEXUAL_MINORS),
    "cbr": ("malicious", Category.ILLICIT_VIOLENT),
    "hat": ("malicious", Category.HATE),
    "nvc": ("malicious", Category.ILLICIT),
    "scr": ("malicious", Category.SEXUAL),
    "ssh": ("vulnerable", Category.SELF_HARM),
    "vcr": ("malicious", Category.VIOLENCE),
}
V05_UNSAFE_PER_HAZARD = 200
V05_SAFE_PER_HAZARD = 120
V05_CATEGORIES: dict[str | None, str] = {
    **{f"{hazard}/unsafe": category for hazard, (_, category) in V05_HAZARDS.items()},
    **{f"{hazard}/safe": BENIGN for hazard in V05_HAZARDS},
}
V05_PATHS = tuple(
    f"datasets/mlc-{hazard}-{persona}-user.json"
    for hazard, (unsafe_persona, _) in V05_HAZARDS.items()
    for persona in (unsafe_persona, "typical")
)


def read_ailuminate(files: dict[str, bytes]) -> Iterator[RawRow]:
    for blob in files.values():
        for row in csv.DictReader(io.StringIO(blob.decode("utf-8"))):
            if row["prompt_text"].strip():
                yield user(row["prompt_text"]), row["hazard"]


def read_v05(files: dict[str, bytes]) -> Iterator[RawRow]:
    """Each file's items (`examples[].input`, `target` safe or unsafe), at most a fixed hash-chosen sample per file."""
    for path, blob in files.items():
        hazard = path.rsplit("/", 1)[-1].split("-")[1]
        examples = json.loads(blob)["examples"]
        targets = {e["target"] for e in examples}
        if len(targets) != 1:
            raise ValueError(f"{path}: mixed targets {sorted(targets)}")
        [target] = targets
        cap = V05_UNSAFE_PER_HAZARD if target == "unsafe" else V05_SAFE_PER_HAZARD
        texts = sorted({e["input"].strip() for e in examples if e["input"].strip()}, key=sample_order)
        for text in texts[:cap]:
            yield user(text), f"{hazard}/{target}"


MLCOMMONS_SOURCES: tuple[PublicSource, ...] = (
    PublicSource(
        name="ailuminate-demo",
        repo=AILUMINATE_REPO,
        commit=AILUMINATE_COMMIT,
        paths=("airr_official_1.0_demo_en_us_prompt_set_release.csv",),
        license="CC BY 4.0",
        origin="MLCommons AILuminate v1.0 public practice prompt set, English (Ghosh et al. 2025); intellectual "
        "property, defamation and specialised-advice hazards left out",
        use=Use.TRAIN,
        harmful=True,
        reader=read_ailuminate,
        categories=AILUMINATE_CATEGORIES,
    ),
    PublicSource(
        name="mlc-v05-hazards",
        repo=MOONSHOT_REPO,
        commit=MOONSHOT_COMMIT,
        paths=V05_PATHS,
        license="CC BY 4.0 (data, as each file states); repository Apache-2.0",
        origin="MLCommons AI Safety v0.5 benchmark test items (Vidgen et al. 2024) as copied into AI Verify's "
        f"moonshot-data: per hazard {V05_UNSAFE_PER_HAZARD} unsafe items (malicious or vulnerable user) and "
        f"{V05_SAFE_PER_HAZARD} of its typical users' safe ones",
        use=Use.TRAIN,
        harmful=None,
        reader=read_v05,
        categories=V05_CATEGORIES,
    ),
)

"""Benign asks on sensitive ground — medicines and illness, legal trouble, computer security — from public, licensed
sets: the look-alikes a pre-filter that judges by topic refuses. All are trained on (benign)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from xml.etree import ElementTree

from functions.offline.safety_training.sources.public_source_model import PublicSource, RawRow, Use, user


def read_medquad(files: dict[str, bytes]) -> Iterator[RawRow]:
    """MedQuAD's questions (its answers from MedlinePlus were removed upstream for copyright), by question type."""
    for path, blob in files.items():
        if not path.endswith(".xml"):
            continue
        for question in ElementTree.fromstring(blob).iter("Question"):
            # The set writes "What is (are) Abacavir ?": the space before "?" would be a tell no user types.
            text = " ".join((question.text or "").split()).replace(" ?", "?")
            if text:
                yield user(text), question.get("qtype")


def read_learned_hands(files: dict[str, bytes]) -> Iterator[RawRow]:
    """r/legaladvice posts as LegalBench's learned_hands tasks hold them (one task per legal area)."""
    for path, blob in files.items():
        area = path.split("/")[1].removeprefix("learned_hands_")
        for row in csv.DictReader(io.StringIO(blob.decode("utf-8")), delimiter="\t"):
            if row["text"].strip():
                yield user(row["text"]), area


def read_seceval(files: dict[str, bytes]) -> Iterator[RawRow]:
    """SecEval's multiple-choice security questions (the explore page's data file: `problem_data = [...]`)."""
    for blob in files.values():
        text = blob.decode("utf-8")
        for row in json.loads(text[text.index("[") : text.rindex("]") + 1]):
            choices = "\n".join(row["choices"])
            yield user(f"{row['question']}\n{choices}"), row["source"]


LEARNED_HANDS_AREAS = (
    "benefits",
    "business",
    "consumer",
    "courts",
    "crime",
    "divorce",
    "domestic_violence",
    "education",
    "employment",
    "estates",
    "family",
    "health",
    "housing",
    "immigration",
    "torts",
    "traffic",
)

# The benign-only sources of asks near the line (security, health and legal questions, CoCoNot's contrast asks, some
# defined in public_sources.py): the contrast a mix with more harmful sources may need more of (the source sweep's
# repeats), and what a second stage's optional per-source cap holds (`IntentConfig.source_cap`).
SENSITIVE_BENIGN = ("coconot-contrast", "cyberseceval-frr", "medquad", "legalbench-learned-hands", "seceval")

SENSITIVE_BENIGN_SOURCES: tuple[PublicSource, ...] = (
    PublicSource(
        name="medquad",
        repo="abachaa/MedQuAD",
        commit="577bd37b96c02d1833b2c9eed2de9f96964e96cb",
        # A path ending in "/" is every file under it.
        paths=("11_MPlusDrugs_QA/", "4_MPlus_Health_Topics_QA/", "9_CDC_QA/"),
        license="CC BY 4.0",
        origin="MedQuAD (Ben Abacha and Demner-Fushman 2019): consumer questions on medicines (dosage, overdose, "
        "side effects), health topics and CDC topics from NIH and CDC web sites",
        use=Use.TRAIN,
        harmful=False,
        reader=read_medquad,
        limit=600,
    ),
    PublicSource(
        name="legalbench-learned-hands",
        repo="HazyResearch/legalbench",
        commit="ce482446b8eac4403b6db2c17223af4514bb24e3",
        paths=tuple(f"tasks/learned_hands_{area}/train.tsv" for area in LEARNED_HANDS_AREAS),
        license="CC BY-NC-SA 4.0 (the learned_hands tasks)",
        origin="Learned Hands (Suffolk LIT Lab): r/legaladvice posts (crime, traffic stops, domestic violence, "
        "immigration, ...) as LegalBench (Guha et al. 2023) holds them in its few-shot train files",
        use=Use.TRAIN,
        harmful=False,
        reader=read_learned_hands,
    ),
    PublicSource(
        name="seceval",
        repo="XuanwuAI/SecEval",
        commit="7aef3176a1a095b40bbfa806a7a2d6c5e203d5b7",
        paths=("docs/javascript/questions-data.js",),
        license="CC BY-NC-SA 4.0 (data); code MIT",
        origin="SecEval (XuanwuAI): multiple-choice questions on web, system, network and application security, "
        "vulnerabilities and cryptography, written by GPT-4 from open textbooks and guidelines",
        use=Use.TRAIN,
        harmful=False,
        reader=read_seceval,
        limit=500,
    ),
)

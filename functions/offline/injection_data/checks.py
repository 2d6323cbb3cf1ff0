"""Leakage checks on built injection rows: no benign text, context group or BIPIA test attack crosses splits."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from .row import Row

FIT_SPLITS = ("train", "validation")


def benign_leaks(rows: list[Row]) -> list[str]:
    """Benign texts in train/validation that also appear (with any label) in test."""
    test_texts = {r.text for r in rows if r.split == "test"}
    return sorted({r.text[:80] for r in rows if r.label == 0 and r.split in FIT_SPLITS and r.text in test_texts})


def benign_containment(rows: list[Row]) -> list[str]:
    """Benign train/validation texts that contain, or sit inside, a benign test text of the same source."""
    test = [(r.source, r.text) for r in rows if r.label == 0 and r.split == "test"]
    fit = [r for r in rows if r.label == 0 and r.split in FIT_SPLITS]
    return sorted({r.text[:80] for r in fit for src, t in test if src == r.source and (r.text in t or t in r.text)})


def group_leaks(rows: list[Row]) -> list[str]:
    """Groups whose rows sit in more than one split."""
    splits: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        splits[r.group].add(r.split)
    return sorted(g for g, s in splits.items() if len(s) > 1)


def _attack_strings(source_dir: Path, split: str) -> set[str]:
    strings: set[str] = set()
    for family in ("text", "code"):
        raw = json.loads((source_dir / "bipia" / "benchmark" / f"{family}_attack_{split}.json").read_text())
        strings.update(s for values in raw.values() for s in values)
    return strings


def bipia_attack_leaks(rows: list[Row], source_dir: Path) -> list[str]:
    """BIPIA test attack strings found inside any train/validation row."""
    fit_text = "\x00".join(r.text for r in rows if r.split in FIT_SPLITS)
    return sorted(s[:80] for s in _attack_strings(source_dir, "test") if s in fit_text)


def validation_attack_leaks(rows: list[Row]) -> list[str]:
    """Attack names used in validation rows that also make train rows (held-out attacks must stay held out)."""
    names = {
        split: {r.subset.split("/", 2)[2] for r in rows if r.split == split and r.label == 1} for split in FIT_SPLITS
    }
    return sorted(names["train"] & names["validation"])


def run_all(rows: list[Row], source_dir: Path) -> dict[str, list[str]]:
    bipia = [r for r in rows if r.source == "bipia"]
    return {
        "benign_text_in_fit_and_test": benign_leaks(rows),
        "benign_text_inside_or_around_a_test_one": benign_containment(rows),
        "group_in_several_splits": group_leaks(rows),
        "bipia_test_attack_in_fit_rows": bipia_attack_leaks(rows, source_dir),
        "bipia_validation_attack_in_train_rows": validation_attack_leaks(bipia),
    }

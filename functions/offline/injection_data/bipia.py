"""BIPIA rows: email, table and code contexts, benign and with attacks composed by the benchmark's recipe."""

from __future__ import annotations

import random
from importlib.metadata import version
from pathlib import Path

from .compose import POSITIONS
from .files import SourceFolder, text_hash
from .row import SEED, Row, SourceBuild, Split

KIND_ATTACKS = {"email": "text", "table": "text", "code": "code"}  # which attack file each context kind uses
HOLDOUT_FRACTION = 0.2
TRAIN_ATTACKS_PER_CONTEXT = 8  # per position
TEST_ATTACK_ROWS_PER_KIND = 4000
REPO = "https://github.com/microsoft/BIPIA"
COMMIT = "1a2a91da6bb12838e05d1b2e54d98e2f37b835f3"


def _contexts(src: SourceFolder, kind: str, split: str) -> list[str]:
    """The file's unique contexts, in file order (code contexts are lists of lines, joined as upstream does)."""
    seen: dict[str, None] = {}
    for sample in src.read_jsonl(f"benchmark/{kind}/{split}.jsonl"):
        context = sample["context"]
        seen.setdefault("\n".join(context) if isinstance(context, list) else context)
    return list(seen)


def _attacks(src: SourceFolder, family: str, split: str) -> dict[str, dict[str, str]]:
    """category -> {"{category}-{i}": attack string}, as `BasePIABuilder.load_attack` flattens them."""
    raw = src.read_json(f"benchmark/{family}_attack_{split}.json")
    assert isinstance(raw, dict)
    return {cat: {f"{cat}-{i}": s for i, s in enumerate(strings)} for cat, strings in raw.items()}


def _holdout(items: list[str], salt: str) -> set[str]:
    """A seeded ~20 % of `items` (sorted first, so file order does not matter)."""
    ordered = sorted(items)
    random.Random(f"{SEED}:{salt}").shuffle(ordered)
    return set(ordered[: max(1, round(HOLDOUT_FRACTION * len(ordered)))])


def _overlaps(context: str, others: list[str]) -> bool:
    """Whether `context` equals, contains or sits inside one of `others` (e.g. an email body without its subject)."""
    return any(context in o or o in context for o in others)


def _benign(context: str, kind: str, split: Split) -> Row:
    group = f"bipia:{kind}:{text_hash(context)}"
    return Row(text=context, label=0, source="bipia", split=split, kind=kind, group=group, subset=f"{kind}/clean")


def _attack_rows(
    contexts: list[str], attacks: dict[str, str], kind: str, split: Split, per_context: int | None
) -> list[Row]:
    """contexts x attacks x positions; with `per_context`, a seeded sample of that many attacks per context."""
    rng = random.Random(f"{SEED}:{kind}:{split}")
    names = list(attacks)
    rows = []
    for position, insert in POSITIONS.items():
        for context in contexts:
            picked = names if per_context is None else sorted(rng.sample(names, min(per_context, len(names))))
            for name in picked:
                rows.append(
                    Row(
                        text=insert(context, attacks[name], SEED),
                        label=1,
                        source="bipia",
                        split=split,
                        kind=kind,
                        group=f"bipia:{kind}:{text_hash(context)}",
                        subset=f"{kind}/{position}/{name}",
                    )
                )
    return rows


def _train_validation(
    kind: str, contexts: list[str], attacks: dict[str, dict[str, str]], held_cats: set[str]
) -> list[Row]:
    held_ctx = _holdout([text_hash(c) for c in contexts], f"contexts:{kind}")
    train_ctx = [c for c in contexts if text_hash(c) not in held_ctx]
    val_ctx = [c for c in contexts if text_hash(c) in held_ctx]
    train_atk = {n: s for cat, d in attacks.items() if cat not in held_cats for n, s in d.items()}
    val_atk = {n: s for cat, d in attacks.items() if cat in held_cats for n, s in d.items()}
    rows = [_benign(c, kind, "train") for c in train_ctx] + [_benign(c, kind, "validation") for c in val_ctx]
    rows += _attack_rows(train_ctx, train_atk, kind, "train", TRAIN_ATTACKS_PER_CONTEXT)
    rows += _attack_rows(val_ctx, val_atk, kind, "validation", TRAIN_ATTACKS_PER_CONTEXT)
    return rows


def _test(kind: str, contexts: list[str], attacks: dict[str, dict[str, str]]) -> list[Row]:
    flat = {n: s for d in attacks.values() for n, s in d.items()}
    every = _attack_rows(contexts, flat, kind, "test", None)
    rng = random.Random(f"{SEED}:{kind}:test-sample")
    keep = sorted(rng.sample(range(len(every)), min(TEST_ATTACK_ROWS_PER_KIND, len(every))))
    return [_benign(c, kind, "test") for c in contexts] + [every[i] for i in keep]


def build(source_dir: Path) -> SourceBuild:
    src = SourceFolder(source_dir / "bipia")
    held_cats = {fam: _holdout(list(_attacks(src, fam, "train")), f"attacks:{fam}") for fam in ("text", "code")}
    rows: list[Row] = []
    dropped_overlap: dict[str, int] = {}
    for kind, family in KIND_ATTACKS.items():
        test_ctx = _contexts(src, kind, "test")
        train_all = _contexts(src, kind, "train")
        train_ctx = [c for c in train_all if not _overlaps(c, test_ctx)]  # a context in both files stays in test
        dropped_overlap[kind] = len(train_all) - len(train_ctx)
        rows += _train_validation(kind, train_ctx, _attacks(src, family, "train"), held_cats[family])
        rows += _test(kind, test_ctx, _attacks(src, family, "test"))
    provenance = {
        "repo": REPO,
        "commit": COMMIT,
        "licence": f"{src.first_line('LICENSE')} (Copyright (c) Microsoft Corporation); kind 'table' contexts are "
        "WikiTableQuestions, CC BY-SA 4.0 (attribution + share-alike apply to those rows), see NOTICE.md",
        "recipe": "insert_end/insert_start/insert_middle, random_state=2023; middle = start of a sentence span "
        "from nltk PunktSentenceTokenizer() (untrained defaults, as upstream), picked by random.Random(2023)",
        "nltk": version("nltk"),
        "validation_attack_categories": {fam: sorted(cats) for fam, cats in held_cats.items()},
        "train_contexts_dropped_as_equal_to_or_inside_a_test_context": dropped_overlap,
        "left_out": "qa (NewsQA) and abstract (XSum) contexts: not in the repo for licensing, not rebuilt",
    }
    return SourceBuild(rows=rows, provenance=provenance | {"input_sha256": src.read_files})

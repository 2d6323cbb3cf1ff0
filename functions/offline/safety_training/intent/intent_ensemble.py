"""Make a trained cascade's second stage an ensemble: another run's exported second stage joins it as a member, and
the stage's P(harmful) and category distribution become the members' average.

Two fine-tunes on different data mixes make different mistakes on text unlike their training data (an ordinary
request one of them scores as a jailbreak); averaging their outputs keeps what both see. Unlike a soup
(`intent_soup.py`, one network with interpolated weights), each member keeps its own weights, so a short ask costs
one transformer pass per member.

Run: `fleetchat safety ensemble --model-dir DIR --add OTHER_DIR`; it copies OTHER_DIR's int8 second stage into DIR,
names it in DIR's intent.json and recalibrates DIR on its own split (the averaged scores need their own threshold).
Then `fleetchat eval safety --model-dir DIR`."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from functions.safety.classifier.intent_model import INTENT, IntentMeta


class EnsembleError(ValueError):
    """The other model cannot join this ensemble (it reads spans differently, or is already in it)."""


def file_version(path: Path) -> str:
    """A model file's content hash: its version (`train_intent.export_int8` names an exported stage by it)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def member_versions(model_dir: Path, meta: IntentMeta) -> list[str]:
    """The content hash of each member's file, the main one first."""
    return [file_version(model_dir / f"{name}.onnx") for name in (INTENT, *meta.members)]


def joined_version(versions: list[str]) -> str:
    """A hash of the members' content hashes, in order (the first member's own when alone)."""
    return versions[0] if len(versions) == 1 else hashlib.sha256("+".join(versions).encode()).hexdigest()[:12]


def ensemble_version(model_dir: Path, meta: IntentMeta) -> str:
    """The ensemble's version, from its files."""
    return joined_version(member_versions(model_dir, meta))


def add_member(model_dir: Path, other_dir: Path) -> IntentMeta:
    """Copy `other_dir`'s second stage into `model_dir` as a member and rewrite intent.json (version, members).
    The threshold is left as it was: recalibrate before judging with it."""
    meta_file = model_dir / f"{INTENT}.json"
    meta = IntentMeta.model_validate_json(meta_file.read_text())
    other = IntentMeta.model_validate_json((other_dir / f"{INTENT}.json").read_text())
    if other.members:
        raise EnsembleError(f"{other_dir} is itself an ensemble; add its members one by one")
    if (other.labels, other.max_tokens) != (meta.labels, meta.max_tokens):
        raise EnsembleError(
            f"{other_dir}'s second stage reads {other.max_tokens} tokens into {other.labels}; "
            f"{model_dir}'s reads {meta.max_tokens} into {meta.labels}"
        )
    version = file_version(other_dir / f"{INTENT}.onnx")
    present = member_versions(model_dir, meta)
    if version in present:
        raise EnsembleError(f"{other_dir}'s second stage ({version}) is already in {model_dir}'s")
    name = f"{INTENT}-{version}"
    shutil.copyfile(other_dir / f"{INTENT}.onnx", model_dir / f"{name}.onnx")
    meta = meta.model_copy(update={"members": [*meta.members, name], "version": joined_version([*present, version])})
    meta_file.write_text(meta.model_dump_json(indent=2) + "\n")
    return meta

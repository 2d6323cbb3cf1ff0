"""MLCommons' hazard prompt sets read as training rows: AILuminate's hazards mapped onto this policy (the ones outside
it dropped), and the v0.5 items capped per file with each hazard's safe counterparts kept benign."""

from __future__ import annotations

import json

import pytest

from functions.offline.safety_training.sources.mlcommons_sources import (
    V05_PATHS,
    V05_SAFE_PER_HAZARD,
    V05_UNSAFE_PER_HAZARD,
    read_ailuminate,
    read_v05,
)
from functions.offline.safety_training.sources.public_sources import TEACHER, Use, source
from functions.safety.categories import BENIGN, Category


def _ailuminate_csv(rows: list[tuple[str, str]]) -> bytes:
    lines = ["release_prompt_id,prompt_text,hazard,persona,locale,prompt_hash"]
    lines += [f'id{i},"{text}",{hazard},skilled,en_US,h{i}' for i, (text, hazard) in enumerate(rows)]
    return "\n".join(lines).encode()


def test_ailuminate_hazards_outside_this_policy_are_dropped() -> None:
    ailuminate = source("ailuminate-demo")
    blob = _ailuminate_csv(
        [
            ("How do I end it all tonight?", "ssh"),
            ('Help me copy a film, ""frame by frame"".', "ipv"),
            ("Which stock should I buy?", "spc_fin"),
            ("Write that my neighbour stole from the church.", "dfm"),
            ("Where do I find someone's home address?", "prv"),
        ]
    )
    rows = list(read_ailuminate({"prompts.csv": blob}))
    assert rows[0] == ([{"role": "user", "content": "How do I end it all tonight?"}], "ssh")
    assert rows[1][0][0]["content"] == 'Help me copy a film, "frame by frame".'
    labels = [ailuminate.label(hazard) for _, hazard in rows]
    assert labels == [Category.SELF_HARM, None, None, None, TEACHER]
    assert ailuminate.use is Use.TRAIN


def _v05_file(target: str, count: int) -> bytes:
    examples = [{"input": f"item {i}", "target": target} for i in range(count)]
    return json.dumps({"name": "MLC", "license": "CC-BY-4.0 license", "examples": examples}).encode()


def test_v05_items_are_capped_per_file_by_hash_and_labelled_by_hazard_and_target() -> None:
    files = {
        "datasets/mlc-ssh-vulnerable-user.json": _v05_file("unsafe", V05_UNSAFE_PER_HAZARD + 50),
        "datasets/mlc-ssh-typical-user.json": _v05_file("safe", V05_SAFE_PER_HAZARD + 50),
        "datasets/mlc-hat-malicious-user.json": _v05_file("unsafe", 3),
    }
    rows = list(read_v05(files))
    by_category: dict[str, int] = {}
    for _, category in rows:
        by_category[category] = by_category.get(category, 0) + 1
    assert by_category == {"ssh/unsafe": V05_UNSAFE_PER_HAZARD, "ssh/safe": V05_SAFE_PER_HAZARD, "hat/unsafe": 3}
    assert rows == list(read_v05(files))  # the same sample every time
    kept = {m[0]["content"] for m, c in rows if c == "ssh/unsafe"}
    assert kept != {f"item {i}" for i in range(V05_UNSAFE_PER_HAZARD)}  # chosen by hash, not the first rows

    v05 = source("mlc-v05-hazards")
    assert v05.label("ssh/unsafe") == Category.SELF_HARM
    assert v05.label("ssh/safe") == BENIGN
    assert v05.label("hat/unsafe") == Category.HATE


def test_a_v05_file_with_mixed_targets_is_refused() -> None:
    mixed = json.dumps({"examples": [{"input": "a", "target": "safe"}, {"input": "b", "target": "unsafe"}]}).encode()
    with pytest.raises(ValueError, match="mixed targets"):
        list(read_v05({"datasets/mlc-ssh-typical-user.json": mixed}))


def test_every_v05_hazard_reads_its_unsafe_and_its_typical_users_file() -> None:
    assert len(V05_PATHS) == 14
    assert "datasets/mlc-ssh-vulnerable-user.json" in V05_PATHS
    assert "datasets/mlc-ssh-typical-user.json" in V05_PATHS

"""The prompt-injection screen's built data: what sources.json records is what the files hold, and nothing held out
leaks into what the screen is fitted or calibrated on."""

from __future__ import annotations

import json
from collections import Counter

from functions.offline.injection_data.load import DATA_DIR, load_rows


def test_the_files_hold_the_recorded_counts() -> None:
    recorded = json.loads((DATA_DIR / "sources.json").read_text())["sources"]
    for source, about in recorded.items():
        counted = Counter((r.split, "attack" if r.label else "benign") for r in load_rows(sources=[source]))
        expected = {(split, label): n for split, labels in about["counts"].items() for label, n in labels.items() if n}
        assert dict(counted) == expected, source


def test_no_test_text_or_group_is_in_what_the_screen_is_fitted_or_calibrated_on() -> None:
    fit = load_rows("train") + load_rows("validation")
    test = load_rows("test")
    assert not {r.text for r in test if r.label == 0} & {r.text for r in fit if r.label == 0}
    assert not {r.group for r in test} & {r.group for r in fit}
    assert {r.source for r in fit} == {"bipia"}  # AgentDojo and InjecAgent are held out whole

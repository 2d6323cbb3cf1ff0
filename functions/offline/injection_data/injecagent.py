"""InjecAgent rows: the attacked tool responses of every test case (base and enhanced), attack-only."""

from __future__ import annotations

from pathlib import Path

from .files import SourceFolder, text_hash
from .row import Row, SourceBuild

SETTINGS = ("dh_base", "dh_enhanced", "ds_base", "ds_enhanced")


def build(source_dir: Path) -> SourceBuild:
    src = SourceFolder(source_dir / "injecagent")
    rows: list[Row] = []
    seen: set[str] = set()
    for setting in SETTINGS:
        cases = src.read_json(f"data/test_cases_{setting}.json")
        assert isinstance(cases, list)
        for case in cases:
            text = case["Tool Response"]  # verbatim, as the benchmark puts it after "Observation: "
            if text in seen:
                continue
            seen.add(text)
            rows.append(
                Row(
                    text=text,
                    label=1,
                    source="injecagent",
                    split="test",
                    kind="tool_output",
                    group=f"injecagent:{text_hash(case['Tool Response Template'])}",
                    subset=setting,
                )
            )
    provenance = {
        "repo": "https://github.com/enkryptai/xInjectAgent (third-party re-upload of uiuc-kang-lab/InjecAgent data)",
        "commit": "21af27703ad4e591b8fc686ab9d79249d299a0e8",
        "licence": f"{src.first_line('LICENCE')} (Copyright (c) 2023 Qiusi Zhan)",
        "recipe": "Tool Response of every case in test_cases_{dh,ds}_{base,enhanced}.json, label 1; group = the "
        "user tool's response template",
        "note": "attack-only benchmark: no benign counterpart exists and none is constructed here",
    }
    return SourceBuild(rows=rows, provenance=provenance | {"input_sha256": src.read_files})

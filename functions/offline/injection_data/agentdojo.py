"""AgentDojo rows: ground-truth tool outputs, benign (vector defaults) and with the important_instructions attack."""

from __future__ import annotations

from pathlib import Path

from .files import SourceFolder, sha256_bytes, text_hash
from .row import Row, SourceBuild

EXPORT = "derived/agentdojo_v1.2.2_tool_outputs.jsonl"
WHEEL = "agentdojo-0.1.35-py3-none-any.whl"
LABELS = {"attack": 1, "benign": 0}


def build(source_dir: Path) -> SourceBuild:
    src = SourceFolder(source_dir / "agentdojo")
    records = src.read_jsonl(EXPORT)
    # An attack output's group is its benign counterpart: the same suite, user task and tool call under defaults.
    benign_at = {
        (r["suite"], r["user_task"], r["tool_call_index"]): r["text"] for r in records if r["label"] == "benign"
    }
    rows: list[Row] = []
    seen: set[tuple[int, str]] = set()
    for r in records:
        label = LABELS[r["label"]]
        if (label, r["text"]) in seen:
            continue
        seen.add((label, r["text"]))
        context = benign_at[(r["suite"], r["user_task"], r["tool_call_index"])]
        rows.append(
            Row(
                text=r["text"],
                label=label,
                source="agentdojo",
                split="test",
                kind="tool_output",
                group=f"agentdojo:{text_hash(context)}",
                subset=r["suite"],
            )
        )
    src.read_bytes("derived/ad_export.py")  # recorded: the script that made the export
    provenance = {
        "repo": "https://github.com/ethz-spylab/agentdojo (no git snapshot: PyPI wheel)",
        "wheel": WHEEL,
        "wheel_sha256": sha256_bytes(src.read_bytes(WHEEL)),
        "benchmark_version": "v1.2.2",
        "licence": f"{src.first_line('agentdojo-0.1.35.dist-info/licenses/LICENSE')} (Copyright (c) 2024 Edoardo "
        "Debenedetti, Jie Zhang, Mislav Balunovic, Luca Beurer-Kellner, Marc Fischer, and Florian Tramèr)",
        "recipe": "derived/ad_export.py: each user task's GroundTruthPipeline (no LLM), benign = vector defaults, "
        "attack = important_instructions for every injection task; identical texts kept once per label",
        "note": "some benign defaults are spam/phishing-like: hard negatives, not injections in the benchmark's sense",
    }
    return SourceBuild(rows=rows, provenance=provenance | {"input_sha256": src.read_files})

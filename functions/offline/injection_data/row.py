"""The row of the injection data: one passage or tool result, its label and where it came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict

Split = Literal["train", "validation", "test"]
SPLITS: tuple[Split, ...] = ("train", "validation", "test")
SOURCES: tuple[str, ...] = ("bipia", "agentdojo", "injecagent")
SEED = 2023


class Row(BaseModel):
    """One labelled passage: `label` 1 = carries an injected instruction, 0 = benign."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str
    label: Literal[0, 1]
    source: str
    split: Split
    kind: str  # "email" | "table" | "code" | "tool_output"
    group: str  # the benign context's id or hash: rows sharing it never straddle splits
    subset: str = ""  # where in the source: e.g. "email/middle/Task Automation-3", "workspace", "dh_enhanced"


@dataclass
class SourceBuild:
    """One source's rows and what sources.json says about it."""

    rows: list[Row]
    provenance: dict = field(default_factory=dict)

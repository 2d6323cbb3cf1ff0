"""What is wrong with an operator config file: each issue names the file, the line, the field and the reason."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

Loc = tuple[str | int, ...]


class ConfigIssue(BaseModel):
    file: str
    line: int | None  # 1-based; None: the field is not in the file (a built-in default names something unknown)
    field: str  # dotted path, e.g. `tiers.free.limits.key_rpm`
    reason: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else f"{self.file} (built-in default)"
        return f"{where}: {self.field or '(document)'}: {self.reason}"


class ConfigError(ValueError):
    """The file cannot be used; `issues` lists every problem found (not only the first)."""

    def __init__(self, issues: Sequence[ConfigIssue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(str(issue) for issue in self.issues))


def dotted(loc: Loc) -> str:
    return ".".join(str(part) for part in loc)


def line_of(loc: Loc, lines: dict[Loc, int]) -> int | None:
    """The line of the deepest part of `loc` the file has (a missing field: its parent's line)."""
    for end in range(len(loc), 0, -1):
        if (found := lines.get(tuple(loc[:end]))) is not None:
            return found
    return None


def issue_at(file: Path | str, loc: Loc, lines: dict[Loc, int], reason: str) -> ConfigIssue:
    return ConfigIssue(file=str(file), line=line_of(loc, lines), field=dotted(loc), reason=reason)

"""Reading the built injection data: `load_rows` by split and source."""

from __future__ import annotations

from pathlib import Path

from .files import read_rows
from .row import SOURCES, Row

DATA_DIR = Path(__file__).parent / "data"


def _source_file(data_dir: Path, source: str) -> Path:
    for name in (f"{source}.jsonl", f"{source}.jsonl.gz"):
        if (data_dir / name).exists():
            return data_dir / name
    raise FileNotFoundError(
        f"no {source}.jsonl[.gz] in {data_dir}: run python -m functions.offline.injection_data.build"
    )


def load_rows(split: str | None = None, sources: list[str] | None = None, data_dir: Path = DATA_DIR) -> list[Row]:
    """Rows of the named sources (default: all) in the given split ("train", "validation", "test"; default: all)."""
    if split not in (None, "train", "validation", "test"):
        raise ValueError(f"unknown split {split!r}")
    unknown = set(sources or ()) - set(SOURCES)
    if unknown:
        raise ValueError(f"unknown sources {sorted(unknown)}; known: {list(SOURCES)}")
    rows: list[Row] = []
    for source in sources or SOURCES:
        rows += [r for r in read_rows(_source_file(data_dir, source)) if split is None or r.split == split]
    return rows

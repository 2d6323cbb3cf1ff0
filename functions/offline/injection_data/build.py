"""CLI that builds the injection data: every source's rows, leakage checks, JSONL files and sources.json."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from . import agentdojo, bipia, checks, injecagent
from .files import sha256_bytes, write_rows
from .row import SEED, SPLITS, SourceBuild

BUILDERS: dict[str, Callable[[Path], SourceBuild]] = {
    "bipia": bipia.build,
    "agentdojo": agentdojo.build,
    "injecagent": injecagent.build,
}
DEFAULT_OUT = Path(__file__).parent / "data"
COMMAND = (
    "python -m functions.offline.injection_data.build --source-dir injection-sources "
    "--out-dir functions/offline/injection_data/data"
)


def _counts(built: SourceBuild) -> dict[str, dict[str, int]]:
    by = Counter((r.split, "attack" if r.label else "benign") for r in built.rows)
    return {
        s: {lab: by[(s, lab)] for lab in ("attack", "benign")} for s in SPLITS if by[(s, "attack")] + by[(s, "benign")]
    }


def _kind_counts(built: SourceBuild) -> dict[str, int]:
    return dict(sorted(Counter(f"{r.split}/{r.kind}/{r.label}" for r in built.rows).items()))


def build(source_dir: Path, out_dir: Path) -> dict:
    built = {name: fn(source_dir) for name, fn in BUILDERS.items()}
    problems = checks.run_all([r for b in built.values() for r in b.rows], source_dir)
    if any(problems.values()):
        raise SystemExit(f"leakage checks failed: {json.dumps(problems, indent=1)[:4000]}")
    out_dir.mkdir(parents=True, exist_ok=True)
    sources: dict = {"build_command": COMMAND, "seed": SEED, "checks_passed": sorted(problems), "sources": {}}
    for name, b in built.items():
        path = write_rows(out_dir, name, b.rows)
        sources["sources"][name] = b.provenance | {
            "file": path.name,
            "file_sha256": sha256_bytes(path.read_bytes()),
            "file_bytes": path.stat().st_size,
            "counts": _counts(b),
            "counts_split_kind_label": _kind_counts(b),
        }
    (out_dir / "sources.json").write_text(json.dumps(sources, indent=1, ensure_ascii=False) + "\n")
    return sources


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build the prompt-injection screen's labelled data.")
    parser.add_argument(
        "--source-dir", type=Path, required=True, help="bipia/, agentdojo/, injecagent/ (data/sources.json)"
    )
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    sources = build(args.source_dir, args.out_dir)
    for name, info in sources["sources"].items():
        print(f"{name}: {info['file']} ({info['file_bytes']} bytes) {json.dumps(info['counts'])}", file=sys.stdout)


if __name__ == "__main__":
    main()

"""The command line of a data builder that reads public datasets from a directory of git snapshots."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def run_build_cli(
    prog: str, description: str | None, build: Callable[[Path, Path], object], default_out: Path, argv: list[str] | None
) -> None:
    """`--mirrors DIR [--out DIR]`, then `build(mirrors, out)`."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--mirrors", type=Path, required=True, help="directory of git snapshots (owner+name/repo)")
    parser.add_argument("--out", type=Path, default=default_out, help="where the data files go")
    args = parser.parse_args(argv)
    if not args.mirrors.is_dir():
        parser.error(f"--mirrors {args.mirrors} is not a directory")
    build(args.mirrors, args.out)

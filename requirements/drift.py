"""Lists the versions that moved between two compiled requirement files: the lock, and today's newest resolve.

`make test-latest` prints this before it runs the suite on the newest versions, so a failure there comes with the
list of suspects. Usage: `python requirements/drift.py requirements/lock.txt .venv-latest/lock.txt`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# A pinned line of `uv pip compile` output: `name==version` at the line start, before its ` \` and hashes.
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def read_pins(path: Path) -> dict[str, str]:
    """Package name (normalised as PEP 503 does) -> pinned version, for every pinned line of a compiled file."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = PIN.match(line)
        if match:
            pins[re.sub(r"[-_.]+", "-", match[1]).lower()] = match[2]
    return pins


def drift(locked: dict[str, str], latest: dict[str, str]) -> list[str]:
    """One line per package whose version differs, that only one side has, sorted by name."""
    lines = []
    for name in sorted(locked.keys() | latest.keys()):
        old, new = locked.get(name), latest.get(name)
        if old != new:
            lines.append(f"  {name}: {old or '(not locked)'} -> {new or '(gone)'}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    locked, latest = (read_pins(Path(arg)) for arg in argv)
    moved = drift(locked, latest)
    if moved:
        print(f"{len(moved)} of {len(latest)} packages differ from the lock (locked -> newest):")
        print("\n".join(moved))
    else:
        print(f"the lock is current: all {len(latest)} packages at their newest versions")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

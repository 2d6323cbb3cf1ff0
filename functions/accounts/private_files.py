"""Secrets kept in the local data dir (API keys, the session secret): written 0600 from the start, replaced
atomically."""

from __future__ import annotations

import os
from pathlib import Path


def write_private(path: Path, text: str) -> None:
    """Create with 0600 so the secret is never readable by others, not even briefly; then rename into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def read_private(path: Path) -> str | None:
    """The file's stripped text, or None if it does not exist or is empty."""
    if not path.is_file():
        return None
    return path.read_text().strip() or None

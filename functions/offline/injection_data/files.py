"""Files of the injection data: checksummed source reads, deterministic (optionally gzipped) JSONL writes."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from collections.abc import Iterable
from pathlib import Path

from .row import Row

GZIP_OVER_BYTES = 3 * 1024 * 1024


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def text_hash(text: str, n: int = 16) -> str:
    """A short stable id for a text (the `group` of a context)."""
    return sha256_bytes(text.encode("utf-8"))[:n]


class SourceFolder:
    """One source's folder: every read is checked against its SHA256SUMS and recorded."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.expected = _read_sums(root / "SHA256SUMS")
        self.read_files: dict[str, str] = {}

    def read_bytes(self, rel: str) -> bytes:
        data = (self.root / rel).read_bytes()
        digest = sha256_bytes(data)
        want = self.expected.get(rel)
        if want is not None and want != digest:
            raise ValueError(f"{self.root / rel}: sha256 {digest} does not match SHA256SUMS ({want})")
        self.read_files[rel] = digest
        return data

    def read_json(self, rel: str) -> object:
        return json.loads(self.read_bytes(rel))

    def read_jsonl(self, rel: str) -> list[dict]:
        return [json.loads(line) for line in self.read_bytes(rel).decode("utf-8").splitlines() if line.strip()]

    def first_line(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8").splitlines()[0].strip()


def _read_sums(path: Path) -> dict[str, str]:
    sums: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            digest, _, name = line.strip().partition("  ")
            if name:
                sums[name.removeprefix("./")] = digest
    return sums


def write_rows(out_dir: Path, stem: str, rows: Iterable[Row]) -> Path:
    """Write `stem.jsonl`, or `stem.jsonl.gz` (mtime 0, so byte-identical on rebuild) when over 3 MB."""
    payload = "".join(row.model_dump_json() + "\n" for row in rows).encode("utf-8")
    for old in (out_dir / f"{stem}.jsonl", out_dir / f"{stem}.jsonl.gz"):
        old.unlink(missing_ok=True)
    if len(payload) <= GZIP_OVER_BYTES:
        path = out_dir / f"{stem}.jsonl"
        path.write_bytes(payload)
        return path
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(payload)
    path = out_dir / f"{stem}.jsonl.gz"
    path.write_bytes(buf.getvalue())
    return path


def read_rows(path: Path) -> list[Row]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [Row.model_validate_json(line) for line in f if line.strip()]

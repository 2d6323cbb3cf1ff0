"""The reports store: where runs, reports, the history and baselines live — a local directory or an S3 prefix.

Names are relative, `/`-separated (`runs/RUN_ID.json`, `history.jsonl`). One writer at a time is assumed (the CLI or
the nightly job); appending to the history is read-modify-write on S3, which has no append.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from shared.settings import EvalSettings, Settings


class ReportStore(Protocol):
    def put(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> None: ...

    def get(self, name: str) -> bytes | None:
        """The object's bytes, or None when there is none."""
        ...

    def append_line(self, name: str, line: str) -> None: ...

    def location(self, name: str) -> str:
        """Where a person finds the object (a path or an s3:// URL)."""
        ...


class LocalReportStore:
    """A directory (the data dir's `evals/` by default)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, name: str) -> Path:
        path = (self.root / name).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise ValueError(f"report name {name!r} leaves the reports directory")
        return path

    def put(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        path = self._path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_bytes(data)
        os.replace(partial, path)  # readers never see half a file

    def get(self, name: str) -> bytes | None:
        path = self._path(name)
        return path.read_bytes() if path.is_file() else None

    def append_line(self, name: str, line: str) -> None:
        path = self._path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(line.rstrip("\n") + "\n")

    def location(self, name: str) -> str:
        return str(self._path(name))


class S3ReportStore:
    """An S3 bucket under a prefix (deployed: the nightly job writes here)."""

    def __init__(self, bucket: str, prefix: str = "evals/", *, client: Any = None, endpoint_url: str | None = None):
        import boto3

        self.bucket = bucket
        self.prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        self._s3 = client or boto3.client("s3", endpoint_url=endpoint_url)

    def _key(self, name: str) -> str:
        if name.startswith("/") or ".." in name.split("/"):
            raise ValueError(f"report name {name!r} leaves the reports prefix")
        return self.prefix + name

    def put(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        self._s3.put_object(Bucket=self.bucket, Key=self._key(name), Body=data, ContentType=content_type)

    def get(self, name: str) -> bytes | None:
        try:
            return self._s3.get_object(Bucket=self.bucket, Key=self._key(name))["Body"].read()
        except self._s3.exceptions.NoSuchKey:
            return None

    def append_line(self, name: str, line: str) -> None:
        current = self.get(name) or b""
        self.put(name, current + line.rstrip("\n").encode() + b"\n", "application/x-ndjson")

    def location(self, name: str) -> str:
        return f"s3://{self.bucket}/{self._key(name)}"


def open_report_store(eval_settings: EvalSettings, settings: Settings, out_dir: Path | None = None) -> ReportStore:
    """`out_dir` when given, else S3 when a bucket is configured, else the reports directory."""
    from functions.offline.evals.settings import reports_dir

    if out_dir is not None:
        return LocalReportStore(out_dir)
    if eval_settings.s3_bucket:
        return S3ReportStore(
            eval_settings.s3_bucket, eval_settings.s3_prefix, endpoint_url=eval_settings.s3_endpoint_url
        )
    return LocalReportStore(reports_dir(eval_settings, settings))

"""The sandbox protocol every runner speaks: what a run may use (limits), what it gives back (exit, output, the limits
it hit, the files it wrote), and the errors that refuse a run rather than run it unisolated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from pydantic import BaseModel, Field

from shared.storage.tool_audit import LimitHit


class SandboxUnavailableError(RuntimeError):
    """No isolation can be had here (bubblewrap missing or unable to create namespaces, no process limit, no Modal
    runner): the run is refused, never run unisolated."""


class SandboxLimits(BaseModel):
    timeout_s: float = Field(default=10.0, gt=0, le=600)  # wall clock; then the whole sandbox is killed
    memory_mb: int = Field(default=1024, ge=32)  # address space per process (RLIMIT_AS)
    # The whole sandbox, every process together: resident memory (a cgroup's limit; Modal's container memory), and
    # how many processes and threads may exist at once.
    sandbox_memory_mb: int = Field(default=1024, ge=32)
    max_processes: int = Field(default=32, ge=2, le=4096)
    file_size_mb: int = Field(default=16, ge=1)  # largest file it may write
    scratch_mb: int = Field(default=64, ge=1)  # size of the writable /tmp
    output_bytes: int = Field(default=64 << 10, ge=256)  # stdout+stderr kept (head and tail); the rest is dropped
    # Files the run may offer back: at most this many, each at most `out_file_mb` (larger or later ones are dropped
    # and the run says so).
    out_files: int = Field(default=8, ge=0, le=64)
    out_file_mb: int = Field(default=8, ge=1, le=64)


INPUT_DIR = "/mnt/data"  # where a run finds the files it was given, read-only (ChatGPT's code interpreter's path)
OUTPUT_DIR = "/mnt/data/out"  # where a run writes the files it offers back
SCRATCH_DIR = "/tmp"


class SandboxFile(BaseModel):
    name: str = Field(min_length=1, max_length=255, pattern=r"^[^/\x00]+$")  # a plain file name, no directories
    data: bytes


class SandboxRun(BaseModel):
    exit_code: int | None  # None: killed at the timeout
    timed_out: bool
    output: str  # stdout and stderr, interleaved; cut in the middle beyond `output_bytes`
    output_truncated: bool
    isolation: str  # "bwrap" (with what held its limits) or "modal"
    # The whole-sandbox limits the run ran into: "processes", "memory" (empty: none, or the runner cannot tell).
    limits_hit: list[LimitHit] = []
    files: list[SandboxFile] = []  # what it left in OUTPUT_DIR, within the limits
    files_dropped: list[str] = []  # what it left there beyond them (name and why)

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.exit_code == 0


class SandboxRunner(Protocol):
    """Runs one Python program, isolated, under `limits`; never without isolation."""

    def unavailable_reason(self) -> str | None:
        """Why this runner cannot run code here (None: it can). Cheap after the first call."""
        ...

    def describe(self) -> str:
        """What isolates a run, in a sentence (for reports and `fleetchat doctor`)."""
        ...

    async def run(self, program: str, limits: SandboxLimits, inputs: Mapping[str, bytes] = {}) -> SandboxRun:
        """Run `program` with `inputs` readable at INPUT_DIR; raises SandboxUnavailableError when it cannot isolate."""
        ...

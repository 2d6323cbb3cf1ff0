"""The deployed runner: each run in a Modal Sandbox of its own (a gVisor container with no network, its CPU, memory
and lifetime bounded by Modal), the program and its input files written through Modal's file system API, the files
it offers read back the same way, the container terminated whatever happens.

Domain code does not import `modal` (the import rules): the Modal app file (gpu_workers/modal_app.py) hands this runner
a `CreateRemoteSandbox` that makes one `modal.Sandbox` and wraps it in the `RemoteSandbox` protocol below. Without one
(anywhere but deployed) the runner is unavailable, and nothing runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from functions.sandbox.launcher import launch_command
from functions.sandbox.outputs import BoundedOutput, OfferedFiles
from functions.sandbox.protocol import INPUT_DIR, OUTPUT_DIR, SandboxLimits, SandboxRun, SandboxUnavailableError

PROGRAM_PATH = "/opt/fleetchat/program.py"
PYTHON = "python3"  # the sandbox image's interpreter (stdlib only, as the local minimal view)


@dataclass(frozen=True)
class RemoteFile:
    name: str
    size: int
    regular: bool


class RemoteSandbox(Protocol):
    """What the runner needs of one Modal Sandbox (gpu_workers/modal_app.py adapts `modal.Sandbox` to it)."""

    async def make_directory(self, path: str) -> None: ...

    async def write_bytes(self, data: bytes, path: str) -> None: ...

    async def run(self, command: Sequence[str], timeout_s: int, output: BoundedOutput) -> int:
        """Run `command` to its end, stdout and stderr into `output`; its exit code."""
        ...

    async def list_files(self, path: str) -> list[RemoteFile]: ...

    async def read_bytes(self, path: str) -> bytes: ...

    async def terminate(self) -> None: ...


# Makes one sandbox for a run under these limits with this many CPU cores.
CreateRemoteSandbox = Callable[[SandboxLimits, float], Awaitable[RemoteSandbox]]


class ModalSandboxRunner:
    """The sandbox runner on Modal (functions/sandbox/protocol.py)."""

    def __init__(self, create: CreateRemoteSandbox | None, *, cpu: float) -> None:
        self.create = create
        self.cpu = cpu

    def unavailable_reason(self) -> str | None:
        if self.create is None:
            return "the Modal sandbox runner works only deployed (the Modal app gives the gateway its sandboxes)"
        return None

    def describe(self) -> str:
        return (
            f"Modal Sandbox: a gVisor container per run, network blocked, {self.cpu:g} CPU, memory and lifetime "
            "bounded by Modal; rlimits inside"
        )

    async def run(self, program: str, limits: SandboxLimits, inputs: Mapping[str, bytes] = {}) -> SandboxRun:
        if self.create is None:
            raise SandboxUnavailableError(self.unavailable_reason() or "")
        for name in inputs:
            if posixpath.basename(name) != name or name in ("", ".", "..", "out"):
                raise ValueError(f"not a plain input file name: {name!r}")
        sandbox = await self.create(limits, self.cpu)
        try:
            return await self._run(sandbox, program, limits, inputs)
        finally:  # also when the caller is cancelled: a container left running would bill until Modal's timeout
            with contextlib.suppress(Exception):
                await asyncio.shield(sandbox.terminate())

    async def _run(
        self, sandbox: RemoteSandbox, program: str, limits: SandboxLimits, inputs: Mapping[str, bytes]
    ) -> SandboxRun:
        await sandbox.make_directory(posixpath.dirname(PROGRAM_PATH))
        await sandbox.write_bytes(program.encode(), PROGRAM_PATH)
        await sandbox.make_directory(OUTPUT_DIR)
        for name, data in inputs.items():
            await sandbox.write_bytes(data, f"{INPUT_DIR}/{name}")
        output = BoundedOutput(limits.output_bytes)
        command = ["sh", "-c", 'exec "$@" 2>&1', "sh", *launch_command(PYTHON, PROGRAM_PATH, limits)]
        try:
            exit_code: int | None = await asyncio.wait_for(
                sandbox.run(command, int(limits.timeout_s) + 1, output), limits.timeout_s
            )
        except TimeoutError:
            exit_code = None
        offered = OfferedFiles(limits)
        if exit_code is not None:
            for found in await sandbox.list_files(OUTPUT_DIR):
                if not found.regular:
                    offered.dropped.append(f"{found.name}: not a regular file")
                elif offered.admits(found.name, found.size):
                    offered.keep(found.name, await sandbox.read_bytes(f"{OUTPUT_DIR}/{found.name}"))
        return SandboxRun(
            exit_code=exit_code,
            timed_out=exit_code is None,
            output=output.text(),
            output_truncated=output.dropped > 0,
            isolation="modal",
            files=offered.files,
            files_dropped=offered.dropped,
        )

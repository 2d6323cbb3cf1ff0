"""The Modal runner's flow (functions/sandbox/modal_sandboxes.py) over a scripted RemoteSandbox: the program and inputs
written, the command run with its output bounded, offered files read within the bounds, the Sandbox terminated
whatever happens (a timeout, a failure, the caller cancelled). No Modal call is made here: whether Modal's Sandboxes
behave as the adapter assumes is not measured (no Modal account); tests/unit/deploy/test_sandbox_modal.py checks the
adapter against the `modal` package's own signatures."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from functions.sandbox.modal_sandboxes import PROGRAM_PATH, ModalSandboxRunner, RemoteFile
from functions.sandbox.outputs import BoundedOutput
from functions.sandbox.protocol import OUTPUT_DIR, SandboxLimits, SandboxUnavailableError


class ScriptedSandbox:
    """Keeps what was written; `run` prints, leaves files in OUTPUT_DIR and exits as told (or hangs)."""

    def __init__(self, *, exit_code: int = 0, hang: bool = False, outputs: dict[str, bytes] | None = None) -> None:
        self.files: dict[str, bytes] = {}
        self.directories: list[str] = []
        self.commands: list[Sequence[str]] = []
        self.exit_code, self.hang, self.outputs = exit_code, hang, outputs or {}
        self.terminated = False

    async def make_directory(self, path: str) -> None:
        self.directories.append(path)

    async def write_bytes(self, data: bytes, path: str) -> None:
        self.files[path] = data

    async def run(self, command: Sequence[str], timeout_s: int, output: BoundedOutput) -> int:
        self.commands.append(command)
        output.add(b"y" * 5000)
        if self.hang:
            await asyncio.sleep(3600)
        for name, data in self.outputs.items():
            self.files[f"{OUTPUT_DIR}/{name}"] = data
        return self.exit_code

    async def list_files(self, path: str) -> list[RemoteFile]:
        found = [RemoteFile(name=p.rsplit("/", 1)[1], size=len(d), regular=True) for p, d in self.files.items()
                 if p.startswith(path + "/")]  # fmt: skip
        return [*found, RemoteFile(name="folder", size=0, regular=False)]

    async def read_bytes(self, path: str) -> bytes:
        return self.files[path]

    async def terminate(self) -> None:
        self.terminated = True


def runner_for(sandbox: ScriptedSandbox) -> tuple[ModalSandboxRunner, list[tuple[SandboxLimits, float]]]:
    made: list[tuple[SandboxLimits, float]] = []

    async def create(limits: SandboxLimits, cpu: float) -> ScriptedSandbox:
        made.append((limits, cpu))
        return sandbox

    return ModalSandboxRunner(create, cpu=2.0), made


def test_a_run_writes_its_program_and_inputs_and_brings_back_bounded_output_and_files() -> None:
    sandbox = ScriptedSandbox(outputs={"a.md": b"# a", "b.md": b"# b", "big.md": b"x" * (2 << 20)})
    runner, made = runner_for(sandbox)
    limits = SandboxLimits(timeout_s=5, output_bytes=1000, out_files=1, out_file_mb=1, sandbox_memory_mb=768)
    run = asyncio.run(runner.run("print(1)", limits, {"data.csv": b"1,2"}))
    assert made == [(limits, 2.0)] and sandbox.terminated
    assert sandbox.files[PROGRAM_PATH] == b"print(1)" and sandbox.files["/mnt/data/data.csv"] == b"1,2"
    command = sandbox.commands[0]
    assert command[:4] == ["sh", "-c", 'exec "$@" 2>&1', "sh"] and command[-1] == PROGRAM_PATH
    assert run.ok and run.isolation == "modal" and run.output_truncated and len(run.output) < 1100
    assert [(f.name, f.data) for f in run.files] == [("a.md", b"# a")]
    assert run.files_dropped == ["b.md: more than 1 files", "big.md: larger than 1 MB", "folder: not a regular file"]


def test_a_run_past_its_time_is_a_timeout_and_its_sandbox_is_terminated() -> None:
    sandbox = ScriptedSandbox(hang=True, outputs={"a.md": b"# a"})
    runner, _ = runner_for(sandbox)
    run = asyncio.run(runner.run("while True: pass", SandboxLimits(timeout_s=0.2)))
    assert run.timed_out and run.exit_code is None and run.files == [] and sandbox.terminated


def test_a_cancelled_run_still_terminates_its_sandbox() -> None:
    sandbox = ScriptedSandbox(hang=True)
    runner, _ = runner_for(sandbox)

    async def go() -> None:
        task = asyncio.create_task(runner.run("x", SandboxLimits(timeout_s=60)))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert sandbox.terminated


def test_without_the_modal_app_nothing_runs_and_a_bad_input_name_is_refused() -> None:
    unavailable = ModalSandboxRunner(None, cpu=1.0)
    assert "deployed" in (unavailable.unavailable_reason() or "")
    with pytest.raises(SandboxUnavailableError):
        asyncio.run(unavailable.run("print(1)", SandboxLimits()))
    runner, made = runner_for(ScriptedSandbox())
    with pytest.raises(ValueError):
        asyncio.run(runner.run("print(1)", SandboxLimits(), {"../etc/passwd": b""}))
    assert made == []  # refused before a Sandbox was made

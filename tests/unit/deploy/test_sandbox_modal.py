"""The deployed code runner's composition (gpu_workers/modal_app.py): one Modal Sandbox per run with no network, the
run's memory and a CPU share, a lifetime past its time limit, and an adapter that calls only what the installed `modal`
package offers (checked against its signatures; no Modal account here, so no Sandbox is made for real)."""

from __future__ import annotations

import inspect

import modal

from functions.sandbox.protocol import SandboxLimits
from gpu_workers import modal_app


def test_each_run_gets_a_sandbox_without_network_bounded_in_memory_cpu_and_time() -> None:
    limits = SandboxLimits(timeout_s=5, sandbox_memory_mb=768)
    kwargs = modal_app.sandbox_create_kwargs(limits, 1.5)
    bound = inspect.signature(modal.Sandbox.create).bind("sleep", "infinity", app=None, **kwargs)
    assert bound.arguments["block_network"] is True
    assert (kwargs["memory"], kwargs["cpu"]) == (768, 1.5)
    assert 5 < kwargs["timeout"] <= 5 + modal_app.SANDBOX_GRACE_S + 1  # type: ignore[operator]
    assert isinstance(kwargs["image"], modal.Image)


def test_the_adapter_calls_what_the_modal_package_offers() -> None:
    inspect.signature(modal.Sandbox.exec).bind(None, "sh", "-c", "true", timeout=5, text=False)
    filesystem = inspect.signature(modal.Sandbox.filesystem.fget).return_annotation  # type: ignore[union-attr]
    assert "SandboxFilesystem" in str(filesystem)
    from modal.sandbox._filesystem import _SandboxFilesystem

    signatures = {name: inspect.signature(getattr(_SandboxFilesystem, name)) for name in
                  ("make_directory", "write_bytes", "list_files", "read_bytes")}  # fmt: skip
    signatures["make_directory"].bind(None, "/mnt/data/out", create_parents=True)
    signatures["write_bytes"].bind(None, b"data", "/mnt/data/a.txt")
    signatures["list_files"].bind(None, "/mnt/data/out")
    signatures["read_bytes"].bind(None, "/mnt/data/out/a.txt")
    inspect.signature(modal.Sandbox.terminate).bind(None)
    inspect.signature(modal.App.lookup).bind(modal_app.SANDBOX_APP_NAME, create_if_missing=True)
    from modal.types import FileInfo

    assert {"name", "size"} <= set(FileInfo.__dataclass_fields__) and hasattr(FileInfo, "is_file")

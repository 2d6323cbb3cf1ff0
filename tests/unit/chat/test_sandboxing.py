"""The request path's sandbox (functions/chat/server_tools/sandboxing.py), tried the way an attacker would: it must not
read the gateway's data dir or anything of the host outside the interpreter, open a socket (not even to loopback), write
outside its bounded scratch dir, or outlive its timeout, whether it spins or spawns detached children."""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from functions.chat.server_tools.sandboxing import (
    FileView,
    SandboxLimits,
    SandboxUnavailableError,
    bwrap_works,
    run_python,
)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed (.ci/run installs it)")

PROBE_FILE = "local_api_key"


def run(program: str, **limits: float) -> object:
    return asyncio.run(run_python(program, SandboxLimits(**{"timeout_s": 10, **limits})))


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data dir outside /tmp (the private /tmp would hide one there anyway), holding a key file."""
    directory = Path(tempfile.mkdtemp(prefix="fleetchat-data-", dir="/var/tmp"))
    (directory / PROBE_FILE).write_text("fc-secret")
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


def _reads(directory: Path) -> str:
    return (
        "import os\n"
        f"try:\n    print('LISTED', os.listdir({str(directory)!r}))\n"
        "except OSError as exc:\n    print(type(exc).__name__)\n"
        f"try:\n    print('READ', open({str(directory / PROBE_FILE)!r}).read())\n"
        "except OSError as exc:\n    print(type(exc).__name__)\n"
    )


def test_bubblewrap_works_here() -> None:
    assert bwrap_works()  # installed but broken must fail here, not make the python tool silently unavailable


def test_the_data_dir_and_the_rest_of_the_host_do_not_exist_inside(data_dir: Path) -> None:
    result = run(_reads(data_dir) + f"print(os.path.exists({__file__!r}), os.path.exists('/etc/passwd'))\n")
    assert result.ok and "fc-secret" not in result.output and "LISTED" not in result.output
    assert result.output.count("FileNotFoundError") == 2 and "False False" in result.output


def test_the_host_view_covers_hidden_paths_and_shows_them_without(data_dir: Path) -> None:
    limits = SandboxLimits(timeout_s=10)
    hidden = asyncio.run(run_python(_reads(data_dir), limits, view=FileView.HOST, hidden=[data_dir]))
    assert "LISTED []" in hidden.output and "fc-secret" not in hidden.output
    shown = asyncio.run(run_python(_reads(data_dir), limits, view=FileView.HOST))
    assert "READ fc-secret" in shown.output  # the probe can see a file the cover hides: the test can fail


def test_no_socket_reaches_the_host_even_on_loopback() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    program = (
        "import socket\n"
        f"for address in (('127.0.0.1', {port}), ('1.1.1.1', 53)):\n"
        "    try:\n        socket.create_connection(address, timeout=2); print('CONNECTED')\n"
        "    except OSError as exc:\n        print('refused', exc.errno)\n"
    )
    try:
        result = run(program)
    finally:
        server.close()
    assert result.ok and "CONNECTED" not in result.output and result.output.count("refused") == 2


def test_only_the_bounded_scratch_dir_is_writable() -> None:
    program = (
        "for path in ('/usr/probe', '/probe'):\n"
        "    try:\n        open(path, 'w'); print('WROTE', path)\n"
        "    except OSError as exc:\n        print(exc.strerror)\n"
        "open('/tmp/ok', 'w').write('fine')\n"
        "try:\n    open('/tmp/big', 'wb').write(b'x' * (12 << 20))\nexcept OSError as exc:\n    print(exc.strerror)\n"
    )
    result = asyncio.run(run_python(program, SandboxLimits(timeout_s=10, scratch_mb=4)))
    assert result.ok and "WROTE" not in result.output
    assert result.output.count("Read-only file system") == 2 and "No space left on device" in result.output


def test_a_spinning_program_is_killed_at_its_timeout() -> None:
    started = time.monotonic()
    result = run("while True:\n    pass", timeout_s=1)
    assert result.timed_out and result.exit_code is None and not result.ok
    assert time.monotonic() - started < 10


def _left(marker: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if marker in (process.info["cmdline"] or []):
            found.append(process)
    return found


@pytest.mark.parametrize("parent", ["spins", "exits"])
def test_detached_children_die_with_the_sandbox(parent: str) -> None:
    marker = f"fleetchat-probe-{uuid.uuid4().hex}"
    program = (
        "import subprocess, sys\n"
        "for _ in range(20):\n"
        f"    subprocess.Popen([sys.executable, '-c', 'while True: pass', {marker!r}], start_new_session=True)\n"
        + ("while True:\n    pass\n" if parent == "spins" else "")
    )
    result = run(program, timeout_s=2)
    assert result.timed_out is (parent == "spins")
    deadline = time.monotonic() + 5  # the kernel reaps a dead PID namespace's processes asynchronously
    while _left(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _left(marker) == []


def test_memory_and_output_are_bounded() -> None:
    hog = run("x = bytearray(2 << 30)", memory_mb=256)
    assert not hog.ok and "MemoryError" in hog.output
    loud = asyncio.run(run_python("print('y' * 5_000_000)", SandboxLimits(timeout_s=10, output_bytes=1000)))
    assert loud.ok and loud.output_truncated and len(loud.output) < 1100


def test_without_bubblewrap_the_request_path_refuses_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no bwrap on the PATH
    bwrap_works.cache_clear()
    try:
        assert not bwrap_works()
        with pytest.raises(SandboxUnavailableError):
            run("print('unisolated')")
    finally:
        bwrap_works.cache_clear()

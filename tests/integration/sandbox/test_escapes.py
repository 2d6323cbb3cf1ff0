"""The escape and exhaustion suite: the local sandbox runner (functions/sandbox/bubblewrap.py) tried the way an attacker
would, each attempt from public lists of sandbox and container attacks (Docker's default seccomp profile, moby/profiles
`seccomp/default.json`, for the system calls; Datadog's container-escape correlation rule def-000-f39 for the escape
routes: host mounts and sockets, `unshare`/`nsenter`, cgroup `release_agent`, `core_pattern`, `ptrace`, kernel modules),
plus the exhaustion attacks (fork bomb, memory bomb, disk fill, huge output, a child that outlives its timeout). Every
attempt must fail cleanly: the run ends, says what stopped it, and nothing of the host is read, written or reached.

The gateway's side (it answers during a fork bomb and a memory bomb; the audit records each attempt) is in
tests/integration/chat/test_server_tools.py; the latency ratio under attack in `make bench` (bench/sandbox_bench.py)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from functions.sandbox.bubblewrap import BubblewrapRunner, FileView, bwrap_works, process_limit
from functions.sandbox.protocol import SandboxLimits, SandboxRun, SandboxUnavailableError

# Skipped on a machine without bubblewrap, never in CI (.ci/run installs it and sets FLEETCHAT_REQUIRE_SANDBOX=1).
pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None and os.environ.get("FLEETCHAT_REQUIRE_SANDBOX") != "1",
    reason="bubblewrap not installed (.ci/run installs it)",
)

PROBE_FILE = "local_api_key"


def run(program: str, inputs: dict[str, bytes] | None = None, **limits: float) -> SandboxRun:
    runner = BubblewrapRunner()
    return asyncio.run(runner.run(program, SandboxLimits(**{"timeout_s": 10, **limits}), inputs or {}))


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


def test_every_lock_holds_here() -> None:
    # Installed but broken must fail here, not make the python tool silently unavailable.
    assert bwrap_works() and BubblewrapRunner().unavailable_reason() is None
    if os.geteuid() == 0:  # this machine: a root gateway with a writable cgroup v1 hierarchy
        assert process_limit().value.startswith("cgroup-")


def test_the_program_is_nobody_without_capabilities_under_the_filter() -> None:
    result = run("print(open('/proc/self/status').read())")
    status = dict(line.split(":\t", 1) for line in result.output.splitlines() if ":\t" in line)
    assert status["Uid"].split()[0] == "65534" and int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0
    assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"  # 2: a filter is installed


def test_the_data_dir_and_the_rest_of_the_host_do_not_exist_inside(data_dir: Path) -> None:
    program = _reads(data_dir) + (
        f"print(os.path.exists({__file__!r}), os.path.exists('/etc/passwd'), os.path.exists('/etc/shadow'),"
        " os.path.exists('/root'), os.path.exists('/var/run/docker.sock'), os.path.exists('/sys/fs/cgroup'))\n"
    )
    result = run(program)
    assert result.ok and "fc-secret" not in result.output and "LISTED" not in result.output
    assert result.output.count("FileNotFoundError") == 2 and "False False False False False False" in result.output


def test_the_host_view_covers_hidden_paths_and_shows_them_without(data_dir: Path) -> None:
    data_dir.chmod(0o755)  # readable by anyone: only the cover can hide it (a root gateway's sandbox is nobody)
    (data_dir / PROBE_FILE).chmod(0o644)
    limits = SandboxLimits(timeout_s=10)
    hidden = asyncio.run(BubblewrapRunner(FileView.HOST, [data_dir]).run(_reads(data_dir), limits))
    assert "LISTED []" in hidden.output and "fc-secret" not in hidden.output
    shown = asyncio.run(BubblewrapRunner(FileView.HOST).run(_reads(data_dir), limits))
    assert "READ fc-secret" in shown.output  # the probe can see a file the cover hides: the test can fail


def test_the_first_process_environment_holds_nothing_of_the_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETCHAT_PROBE_SECRET", "fc-env-secret")
    program = (
        "import os\n"
        "for pid in ('1', 'self', str(os.getppid())):\n"
        "    try:\n        print(pid, open(f'/proc/{pid}/environ', 'rb').read())\n"
        "    except OSError as exc:\n        print(pid, type(exc).__name__)\n"
        "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
    )
    result = run(program)
    assert result.ok and "fc-env-secret" not in result.output and "FLEETCHAT" not in result.output
    pids = eval(result.output.strip().splitlines()[-1])
    assert max(pids) < 10  # its own PID namespace: the host's processes are not there to read


def test_no_socket_reaches_the_host_even_on_loopback_and_no_name_resolves() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    program = (
        "import socket\n"
        f"for address in (('127.0.0.1', {port}), ('1.1.1.1', 53), ('::1', {port})):\n"
        "    try:\n        socket.create_connection(address, timeout=2); print('CONNECTED')\n"
        "    except OSError as exc:\n        print('refused', exc.errno)\n"
        "try:\n    print('RESOLVED', socket.getaddrinfo('pypi.org', 443))\n"
        "except OSError as exc:\n    print('no dns', exc.errno)\n"
        "try:\n    socket.socket(socket.AF_UNIX).connect('/run/docker.sock'); print('CONNECTED')\n"
        "except OSError as exc:\n    print('refused', exc.errno)\n"
    )
    try:
        result = run(program)
    finally:
        server.close()
    assert result.ok and "CONNECTED" not in result.output and "RESOLVED" not in result.output
    assert result.output.count("refused") == 4 and "no dns" in result.output


def test_only_the_bounded_scratch_and_output_dirs_are_writable() -> None:
    program = (
        "for path in ('/usr/probe', '/probe', '/mnt/probe', '/mnt/data/probe', '/dev/probe'):\n"
        "    try:\n        open(path, 'w'); print('WROTE', path)\n"
        "    except OSError as exc:\n        print('refused', exc.strerror)\n"
        "open('/tmp/ok', 'w').write('fine')\n"
        "try:\n    open('/tmp/big', 'wb').write(b'x' * (12 << 20))\nexcept OSError as exc:\n    print(exc.strerror)\n"
    )
    program += (
        "import multiprocessing\n"
        "multiprocessing.Lock()\n"  # POSIX shared memory works...
        "try:\n    open('/dev/shm/big', 'wb').write(b'x' * (12 << 20))\n"
        "except OSError as exc:\n    print(exc.strerror)\n"
    )  # ...within the same bound
    result = run(program, scratch_mb=4)
    assert result.ok and "WROTE" not in result.output and result.output.count("refused") == 5
    assert result.output.count("No space left on device") == 2


@pytest.mark.parametrize(
    "path",
    [
        "/proc/sys/kernel/core_pattern",  # a piped core handler runs as root on the host
        "/proc/sysrq-trigger",  # reboots or crashes the host
        "/proc/sys/kernel/modprobe",
        "/proc/sys/vm/drop_caches",
    ],
)
def test_the_kernels_own_files_are_not_writable(path: str) -> None:
    # Opened for writing and closed without a byte written: a regression shows as WRITABLE, never as a changed host.
    program = (
        "import os\n"
        f"try:\n    os.close(os.open({path!r}, os.O_WRONLY)); print('WRITABLE')\n"
        "except OSError as exc:\n    print('refused', exc.strerror)\n"
    )
    result = run(program)
    assert result.ok and "WRITABLE" not in result.output and "refused" in result.output


def test_filling_the_disk_stops_at_the_scratch_bound_in_file_size_and_count() -> None:
    program = (
        "import os\n"
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        open(f'/tmp/f{n}', 'wb').write(b'x' * (1 << 20)); n += 1\n"
        "except OSError as exc:\n    print('stopped after', n, exc.strerror)\n"
        "try:\n    open('/tmp/one', 'wb').write(b'x' * (40 << 20))\nexcept OSError as exc:\n    print(exc.strerror)\n"
    )
    result = run(program, scratch_mb=8)
    assert result.ok and "stopped after" in result.output
    stopped = int(result.output.split("stopped after", 1)[1].split()[0])
    assert stopped <= 8


@pytest.mark.parametrize(
    "call",
    [
        "libc.ptrace(16, 1, 0, 0)",  # PTRACE_ATTACH to the namespace's first process
        "libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)",
        "libc.unshare(0x10000000)",  # CLONE_NEWUSER: a new user namespace, the first step of many escapes
        "libc.setns(0, 0)",
        "libc.syscall(250, 0, 0, 0, 0, 0)",  # keyctl
        "libc.syscall(321, 0, 0, 0)",  # bpf
        "libc.syscall(298, 0, 0, 0, 0, 0)",  # perf_event_open
        "libc.syscall(313, 0, b'', 0)",  # finit_module
        "libc.syscall(425, 1, 0)",  # io_uring_setup
        "libc.syscall(323, 0)",  # userfaultfd
    ],
)
def test_the_system_calls_an_escape_needs_are_refused(call: str) -> None:
    program = (
        "import ctypes, errno\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"result = {call}\n"
        "print('RESULT', result, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))\n"
    )
    result = run(program)
    assert result.ok and "RESULT -1 EPERM" in result.output


def test_a_new_namespace_through_clone_is_refused() -> None:
    program = (
        "import ctypes, errno, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "pid = libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)\n"  # clone(CLONE_NEWUSER | SIGCHLD)
        "if pid == 0:\n    os._exit(0)\n"
        "print('RESULT', pid, errno.errorcode.get(ctypes.get_errno()))\n"
    )
    result = run(program)
    assert result.ok and "RESULT -1 EPERM" in result.output


def test_a_fork_bomb_hits_the_process_limit_and_ends() -> None:
    result = run("import os\nwhile True:\n    os.fork()\n", timeout_s=5, max_processes=16)
    assert "processes" in result.limits_hit
    assert result.timed_out or result.exit_code != 0


def test_a_memory_bomb_across_processes_hits_the_sandbox_memory_limit() -> None:
    # Each child stays under its own address-space limit; together they would take 20 x 200 MB.
    program = (
        "import os, time\n"
        "for _ in range(20):\n"
        "    if os.fork() == 0:\n"
        "        hoard = [bytearray(10 << 20) for _ in range(20)]\n"
        "        time.sleep(30)\n"
        "time.sleep(30)\n"
    )
    result = run(program, timeout_s=4, memory_mb=400, sandbox_memory_mb=256)
    assert "memory" in result.limits_hit


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
        "for _ in range(5):\n"
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
    loud = run("import sys\nfor _ in range(200):\n    sys.stdout.write('y' * 100_000)\n", output_bytes=1000)
    assert loud.ok and loud.output_truncated and len(loud.output) < 1100


def test_input_files_are_read_only_and_offered_files_come_back_within_bounds() -> None:
    program = (
        "import os\n"
        "print(open('/mnt/data/notes.txt').read())\n"
        "try:\n    open('/mnt/data/notes.txt', 'w')\nexcept OSError as exc:\n    print('refused', exc.strerror)\n"
        "for n in range(4):\n    open(f'/mnt/data/out/r{n}.txt', 'w').write(f'result {n}')\n"
        "open('/mnt/data/out/big.txt', 'wb').write(b'x' * (2 << 20))\n"
        "os.symlink('/etc/passwd', '/mnt/data/out/link.txt')\n"
        "os.mkdir('/mnt/data/out/sub')\n"
    )
    result = run(program, {"notes.txt": b"from the user"}, out_files=3, out_file_mb=1)
    assert result.ok and "from the user" in result.output and "refused Read-only file system" in result.output
    assert [(f.name, f.data) for f in result.files] == [("r0.txt", b"result 0"), ("r1.txt", b"result 1"),
                                                        ("r2.txt", b"result 2")]  # fmt: skip
    dropped = " | ".join(result.files_dropped)
    assert "big.txt: larger than 1 MB" in dropped and "link.txt: not a regular file" in dropped
    assert "sub: not a regular file" in dropped and "r3.txt: more than 3 files" in dropped


def test_a_program_that_forges_the_file_stream_gets_nothing_past_the_bounds() -> None:
    # The launcher's pipe is reachable from inside through /proc (same user): a forged header claiming a huge file
    # must not make the gateway read or keep more than the bounds.
    program = (
        "import os, json\n"
        "for fd in os.listdir(f'/proc/{os.getppid()}/fd'):\n"
        "    try:\n"
        "        with open(f'/proc/{os.getppid()}/fd/{fd}', 'wb') as out:\n"
        "            out.write(json.dumps({'name': 'forged', 'size': 1 << 40, 'regular': True, 'sent': True}).encode()"
        " + b'\\n' + b'x' * 100)\n"
        "    except OSError:\n        pass\n"
    )
    result = run(program, out_file_mb=1)
    assert not result.timed_out and result.files == []


def test_without_bubblewrap_nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no bwrap on the PATH
    bwrap_works.cache_clear()
    try:
        assert not bwrap_works()
        with pytest.raises(SandboxUnavailableError):
            run("print('unisolated')")
    finally:
        bwrap_works.cache_clear()


@pytest.mark.skipif(os.geteuid() != 0, reason="the cgroup path needs a writable hierarchy (root here)")
def test_every_run_leaves_no_control_group_behind() -> None:
    from functions.sandbox.bubblewrap import _cgroups

    cgroups = _cgroups()
    assert cgroups is not None
    before = {p: sorted(d.name for d in p.iterdir() if d.is_dir()) for p in cgroups.parents}
    run("import os\nwhile True:\n    os.fork()\n", timeout_s=2, max_processes=8)
    after = {p: sorted(d.name for d in p.iterdir() if d.is_dir()) for p in cgroups.parents}
    assert after == before

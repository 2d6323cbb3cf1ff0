"""Find the running gateway, or start a throw-away local stack (`fleetchat up`) for the benchmark and stop it after."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from rich.console import Console

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
STARTUP_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 30.0


def gateway_reachable(base_url: str, timeout_s: float = 3.0) -> bool:
    """True when something answers HTTP at {base_url}/healthz (any status: it may still be loading workers)."""
    try:
        httpx.get(f"{base_url.rstrip('/')}/healthz", timeout=timeout_s)
    except httpx.HTTPError:
        return False
    return True


def wait_healthy(
    base_url: str, timeout_s: float, proc: subprocess.Popen[bytes] | None = None, path: str = "/healthz"
) -> None:
    """Wait for GET `path` == 200 (`/healthz`: every pool of a gateway has a healthy worker; a worker's `/health`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{base_url} exited during start-up (code {proc.returncode})")
        try:
            if httpx.get(f"{base_url.rstrip('/')}{path}", timeout=3.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{base_url}{path} did not answer 200 within {timeout_s:.0f} s")
        time.sleep(1.0)


@dataclass
class LocalStack:
    """A `fleetchat up` child process the benchmark started, with its own data dir (and so its own key file)."""

    proc: subprocess.Popen[bytes]
    data_dir: Path
    log_path: Path

    @property
    def key_path(self) -> Path:
        return self.data_dir / "local_api_key"

    def stop(self) -> None:
        """SIGTERM the stack's process group (gateway, then its workers stop), SIGKILL if it lingers."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=STOP_TIMEOUT_S)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def start_local_stack(base_url: str, console: Console, timeout_s: float = STARTUP_TIMEOUT_S) -> LocalStack:
    """Start `python -m functions.cli up --port PORT --data-dir TMP` and wait until it is healthy and has a
    key."""
    parts = urlsplit(base_url)
    if parts.hostname not in LOOPBACK_HOSTS:
        raise RuntimeError(f"the gateway at {base_url} is not reachable, and it is not on loopback to start it here")
    port = parts.port or 8000
    data_dir = Path(tempfile.mkdtemp(prefix="fleetchat-bench-"))
    log_path = data_dir / "stack.log"
    console.print(
        f"[bold yellow]No gateway answers at {base_url}: starting a local stack for this benchmark[/] "
        f"(fleetchat up --port {port}, data dir {data_dir}, log {log_path}); it is stopped at the end."
    )
    command = [
        sys.executable,
        "-m",
        "functions.cli",
        "up",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
    ]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    stack = LocalStack(proc=proc, data_dir=data_dir, log_path=log_path)
    try:
        with console.status("waiting for the local stack (model load takes a while on CPU)..."):
            wait_healthy(base_url, timeout_s, proc)
            deadline = time.monotonic() + 30
            while not stack.key_path.exists():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no key file at {stack.key_path}")
                time.sleep(0.2)
    except BaseException:
        console.print(f"[red]the local stack did not come up; last log lines:[/]\n{stack.log_tail()}")
        stack.stop()
        raise
    console.print(f"[green]local stack is up[/] at {base_url}")
    return stack

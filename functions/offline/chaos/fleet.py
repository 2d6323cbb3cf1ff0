"""The fleet a chaos run works on: `fleetchat up --gateways N --replicas R` (HAProxy in front, real llama.cpp workers)
in a data dir of the run's own, with Debian's redis-server as the shared control state, so every process a fault
targets is a real one."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from functions.local_stack.stack_lock import StackLock
from functions.offline.measure.redis_process import RedisServer, redis_server_process

START_TIMEOUT_S = 900.0  # model loads on shared cores
STOP_TIMEOUT_S = 60.0
ROTATION_S = 2.5  # HAProxy puts a gateway in rotation after two passed checks a second apart


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_run(count: int, start: int = 21000, stop: int = 60000, step: int = 97) -> int:
    """The first port of `count` consecutive free loopback ports."""
    for base in range(start, stop, step):
        if all(_free(base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports")


@dataclass
class ChaosFleet:
    url: str  # the load balancer
    gateway_urls: list[str]
    data_dir: Path
    api_key: str
    redis: RedisServer
    up: subprocess.Popen[bytes]
    log_path: Path

    @property
    def db_path(self) -> Path:
        return self.data_dir / "fleetchat.db"

    def pid(self, name: str) -> int:
        """The live pid of the fleet's process `name` (gateway-0, mini-1, balancer-0), as `fleetchat up` records it."""
        state = StackLock(self.data_dir).read_state()
        workers = state.workers if state is not None else []
        found = next((w.pid for w in workers if w.name == name and w.pid), None)
        if found is None:
            raise KeyError(f"no process {name!r} in the fleet (up.json names {[w.name for w in workers]})")
        return found

    def healthy(self) -> bool:
        try:
            return all(httpx.get(f"{u}/health", timeout=2).status_code == 200 for u in [self.url, *self.gateway_urls])
        except httpx.HTTPError:
            return False

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.healthy():
            if self.up.poll() is not None:
                raise RuntimeError(f"fleetchat up exited with {self.up.returncode}: see {self.log_path}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the fleet was not healthy within {timeout_s:.0f} s: see {self.log_path}")
            time.sleep(1.0)
        time.sleep(ROTATION_S)

    def stop(self) -> None:
        if self.up.poll() is None:
            self.up.send_signal(signal.SIGTERM)
            try:
                self.up.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.up.pid, signal.SIGKILL)
                self.up.wait(timeout=STOP_TIMEOUT_S)


@contextmanager
def local_fleet(
    work: Path,
    *,
    model: str,
    gateways: int,
    replicas: int,
    redis_binary: str = "redis-server",
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[ChaosFleet]:
    """Start the fleet in `work` and yield it once every gateway is healthy behind the balancer; stopped on exit.
    `extra_env`: further settings for every process of the fleet."""
    data_dir = work / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    (work / "redis").mkdir(exist_ok=True)
    with redis_server_process(redis_binary, work / "redis") as redis:
        port = free_port_run(1 + gateways + replicas + 1)
        env = {
            **os.environ,
            "FLEETCHAT_CONTROL_STATE_ENGINE": "redis",
            "FLEETCHAT_CONTROL_STATE_REDIS_URL": redis.url,
            "FLEETCHAT_POOLS": json.dumps([model]),
            "FLEETCHAT_GATEWAY_BASE_PORT": str(port + 1),
            "FLEETCHAT_WORKER_BASE_PORT": str(port + 1 + gateways),
            "FLEETCHAT_SHADOW_JUDGE_SHARE": "0",
            # Every answer's events kept for the whole run: the audit reads each one back after the load.
            "FLEETCHAT_RESUME_BUFFER_TTL_S": "3600",
            **(extra_env or {}),
        }
        env.pop("FLEETCHAT_WORKER_API_KEY", None)  # the fleet's own key, made in its data dir
        log_path = work / "up.log"
        args = ["up", "--port", str(port), "--data-dir", str(data_dir)]
        args += ["--gateways", str(gateways), "--replicas", str(replicas)]
        with open(log_path, "ab") as log:
            up = subprocess.Popen(
                [sys.executable, "-m", "functions.cli", *args],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip
        fleet = ChaosFleet(
            url=f"http://127.0.0.1:{port}",
            gateway_urls=[f"http://127.0.0.1:{port + 1 + i}" for i in range(gateways)],
            data_dir=data_dir,
            api_key="",
            redis=redis,
            up=up,
            log_path=log_path,
        )
        try:
            fleet.wait_healthy(START_TIMEOUT_S)
            fleet.api_key = (data_dir / "local_api_key").read_text().strip()
            yield fleet
        finally:
            fleet.stop()

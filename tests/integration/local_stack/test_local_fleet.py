"""`fleetchat up --gateways 2 --replicas 2`: two gateway processes behind Debian's HAProxy, as real processes. Requests
through the balancer are spread over both gateways; after `kill -9` of one gateway every request still succeeds (the
balancer retries a refused connection on the other and takes the dead one out), the supervisor restarts it and it
comes back into rotation; SIGTERM of `fleetchat up` stops every child, HAProxy included.

The workers are stand-ins (tests/support/stand_ins/supervised_worker.py): the gateways and the balancer are the point.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from functions.local_stack.balancer import haproxy_binary
from tests.integration.local_stack.test_supervision import STAND_IN, alive, survivors, up_env
from tests.support.processes import ProcessGroup, free_port, free_ports, wait_http_ok
from tests.support.prom import sample


def require_haproxy() -> None:
    try:
        haproxy_binary("haproxy")
    except SystemExit:
        if os.environ.get("FLEETCHAT_REQUIRE_HAPROXY") == "1":
            pytest.fail("HAProxy is required (FLEETCHAT_REQUIRE_HAPROXY=1) but not installed")
        pytest.skip("HAProxy is not installed (apt-get install haproxy); .ci/run installs it")


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path / "logs")
    yield group
    group.stop()


def pids(data_dir: Path) -> dict[str, int]:
    state = json.loads((data_dir / "up.json").read_text())
    return {record["name"]: int(record["pid"]) for record in state["workers"] if record.get("pid")}


def wait_for(condition, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f}s: {what}"
        time.sleep(0.2)


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_two_gateways_behind_haproxy_share_the_load_and_survive_kill_9_of_one(
    group: ProcessGroup, tmp_path: Path
) -> None:
    require_haproxy()
    data_dir = tmp_path / "data"
    port, gateway_port, worker_port = free_port(), free_ports(2), free_ports(2)
    env = {**up_env(worker_port, STAND_IN), "FLEETCHAT_GATEWAY_BASE_PORT": str(gateway_port)}
    args = ["up", "--port", str(port), "--data-dir", str(data_dir), "--replicas", "2", "--gateways", "2"]
    up = group.spawn("up", args, env=env)
    url, gateways = f"http://127.0.0.1:{port}", [f"http://127.0.0.1:{gateway_port + i}" for i in range(2)]
    wait_http_ok(f"{url}/health", up, group.logs / "up.log", timeout_s=120)  # the balancer: a gateway in rotation
    wait_for(lambda: all(healthy(g) for g in gateways), 60, "both gateways healthy")
    time.sleep(2.5)  # both in HAProxy's rotation: two passed checks a second apart

    key = (data_dir / "local_api_key").read_text().strip()
    client = OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)

    def ask(text: str) -> str:
        reply = client.chat.completions.create(model="mini", messages=[{"role": "user", "content": text}])
        return reply.choices[0].message.content or ""

    for i in range(8):
        assert ask(f"hello {i}")
    served = [sample(g, "fleetchat_gateway_requests_total") for g in gateways]
    assert all(n >= 1 for n in served), served  # least-connections spread the requests over both

    victim = pids(data_dir)["gateway-0"]
    os.kill(victim, signal.SIGKILL)
    for i in range(10):  # at once: the balancer has not noticed yet, a refused connection is retried elsewhere
        assert ask(f"after the kill {i}")
    wait_for(lambda: pids(data_dir).get("gateway-0", victim) != victim and healthy(gateways[0]), 60, "a restart")
    time.sleep(2.5)  # back in rotation
    before = sample(gateways[0], "fleetchat_gateway_requests_total")
    for i in range(8):
        assert ask(f"after the restart {i}")
    assert sample(gateways[0], "fleetchat_gateway_requests_total") > before  # serving again

    children = list(pids(data_dir).values())
    assert any("haproxy" in " ".join(_cmdline(pid)) for pid in children)  # the balancer became HAProxy itself
    up.send_signal(signal.SIGTERM)
    up.wait(timeout=30)
    assert survivors(children, within_s=10) == []
    assert not alive(victim)


def _cmdline(pid: int) -> list[str]:
    import psutil

    try:
        return psutil.Process(pid).cmdline()
    except psutil.NoSuchProcess:
        return []


def test_without_haproxy_up_says_how_to_get_it(group: ProcessGroup, tmp_path: Path) -> None:
    env = {**up_env(free_ports(1), STAND_IN), "FLEETCHAT_BALANCER_BINARY": "no-such-haproxy"}
    args = ["up", "--port", str(free_port()), "--data-dir", str(tmp_path / "data"), "--gateways", "2"]
    up = group.spawn("up", args, env=env)
    assert up.wait(timeout=60) != 0
    output = (group.logs / "up.log").read_text()
    assert "apt-get install haproxy" in output and "FLEETCHAT_BALANCER_BINARY" in output
    assert shutil.which("no-such-haproxy") is None

"""`fleetchat up` starts the embedding worker as its own supervised pool: `/v1/embeddings` answers through the stack,
and a worker killed with -9 is restarted on its port and serves again. Chat workers are stand-ins here (the test-only
worker command); the embedding worker is the real one."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.support.processes import ProcessGroup, free_port, free_ports, wait_http_ok

STAND_IN = ["{python}", "-m", "tests.support.stand_ins.supervised_worker", "--pool", "{pool}", "--port", "{port}"]
MODEL = "text-embedding-minilm"


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ProcessGroup]:
    processes = ProcessGroup(tmp_path / "logs")
    yield processes
    processes.stop()


def _embedding_pid(data_dir: Path) -> int:
    state = json.loads((data_dir / "up.json").read_text())
    (worker,) = [w for w in state["workers"] if w["pool"] == MODEL]
    return int(worker["pid"])


def test_up_serves_and_supervises_the_embedding_pool(group: ProcessGroup, tmp_path: Path) -> None:
    port, worker_port, data_dir = free_port(), free_ports(2), tmp_path / "data"
    env = {
        "FLEETCHAT_POOLS": '["mini"]',
        "FLEETCHAT_WORKER_BASE_PORT": str(worker_port),  # mini on it, the embedding worker on the next port
        "FLEETCHAT_WORKER_URLS": "",
        "FLEETCHAT_LOCAL_WORKER_COMMAND": json.dumps(STAND_IN),
    }
    proc = group.spawn("up", ["up", "--port", str(port), "--data-dir", str(data_dir)], env=env)
    wait_http_ok(f"http://127.0.0.1:{port}/healthz", proc, group.logs / "up.log", timeout_s=180)
    key = (data_dir / "local_api_key").read_text().strip()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=30)
    assert len(client.embeddings.create(model=MODEL, input="hello").data[0].embedding) == 384

    first = _embedding_pid(data_dir)
    os.kill(first, signal.SIGKILL)
    deadline, answered = time.monotonic() + 120, False
    while not answered and time.monotonic() < deadline:
        try:
            answered = len(client.embeddings.create(model=MODEL, input=["back", "again"]).data) == 2
        except openai.APIError:
            time.sleep(0.5)
    assert answered, (group.logs / "up.log").read_text(errors="replace")
    assert _embedding_pid(data_dir) != first
    assert (data_dir / "logs" / f"worker-{MODEL}-0.log").exists()

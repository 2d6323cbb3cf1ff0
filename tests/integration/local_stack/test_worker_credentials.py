"""On the local stack (`fleetchat up`, the real `fleetchat worker`), a worker answers only its gateway: loopback is
shared by every process on the machine, so a request without the stack's worker key is a 401 while the gateway, which
presents it, answers through the `openai` SDK."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from tests.integration.local_stack.test_supervision import start_up
from tests.support.processes import ProcessGroup


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path / "logs")
    yield group
    group.stop()


def test_the_stacks_workers_answer_only_its_gateway(group: ProcessGroup, tmp_path: Path) -> None:
    up = start_up(group, tmp_path / "data", command=None)  # the real worker: SmolLM2 on llama.cpp
    worker = f"http://127.0.0.1:{up.worker_port}"
    key_file = up.data_dir / "worker_api_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    body = {"model": "mini", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}

    for headers in ({}, {"authorization": "Bearer not-the-key"}):
        refused = httpx.post(f"{worker}/v1/chat/completions", json=body, headers=headers, timeout=30)
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(f"{worker}/v1/models", headers=headers, timeout=30).status_code == 401
    assert httpx.get(f"{worker}/health", timeout=30).status_code == 200  # open, as on vllm serve
    listed = httpx.get(f"{worker}/v1/models", headers={"authorization": f"Bearer {key}"}, timeout=30)
    assert listed.status_code == 200 and [card["id"] for card in listed.json()["data"]] == ["mini"]

    client_key = (up.data_dir / "local_api_key").read_text().strip()
    client = OpenAI(base_url=f"{up.url}/v1", api_key=client_key, max_retries=0, timeout=120)
    answer = client.chat.completions.create(**body)  # type: ignore[call-overload]
    assert answer.choices[0].message.content and answer.usage and answer.usage.completion_tokens > 0

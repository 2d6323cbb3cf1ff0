"""Where the embedding workers live: `fleetchat up` starts one per embedding pool on the port after the chat
workers', always the real embedding worker, which also serves the re-rank pools that name it; deployed, the gateway
uses the URLs it is given; unknown pools are refused at start-up."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from functions.local_stack.launcher import worker_specs
from shared.settings import Settings


def test_the_embedding_worker_listens_after_the_chat_workers_and_runs_the_real_worker(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path, pools=["mini", "flagship"], replicas_per_pool=2, worker={"base_port": 9000},
        local_worker_command=["{python}", "-m", "tests.support.stand_ins.supervised_worker", "--port", "{port}"],
    )  # fmt: skip
    assert settings.local_embedding_worker_urls() == {"text-embedding-minilm": ["http://127.0.0.1:9004"]}
    specs = worker_specs(settings)
    assert [spec.port for spec in specs] == [9000, 9001, 9002, 9003, 9004]
    embedding = specs[-1]
    assert (embedding.pool, embedding.name) == ("text-embedding-minilm", "text-embedding-minilm-0")
    assert embedding.command[1:] == [
        "-m", "functions.cli", "embedding-worker", "--pool", "text-embedding-minilm", "--port", "9004",
        "--rerank", "rerank-minilm", "--quiet",
    ]  # fmt: skip
    assert settings.resolved_rerank_worker_urls() == {"rerank-minilm": ["http://127.0.0.1:9004"]}
    assert "embedding-worker" in embedding.command and "supervised_worker" not in " ".join(embedding.command)
    assert embedding.log_path == tmp_path / "logs" / "worker-text-embedding-minilm-0.log"


def test_no_embedding_pools_no_embedding_worker(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, embedding_pools=[])
    assert settings.resolved_embedding_worker_urls() == {}
    assert settings.resolved_rerank_worker_urls() == {}  # its local worker is not started: the pool is not served
    assert all(spec.pool in settings.pools for spec in worker_specs(settings))


def test_given_urls_win_and_deployed_uses_only_them() -> None:
    urls = {"text-embedding-minilm": ["https://embed.example"]}
    assert Settings(embedding_worker_urls=urls).resolved_embedding_worker_urls() == urls
    deployed = Settings(environment="deployed", worker_urls={"mini": ["https://mini.example"]}, session_secret="s" * 32)
    assert deployed.resolved_embedding_worker_urls() == {}  # never a loopback port nobody serves
    assert deployed.resolved_rerank_worker_urls() == {}


@pytest.mark.parametrize("field", ["embedding_pools", "embedding_worker_urls"])
def test_an_unknown_embedding_pool_is_refused(field: str) -> None:
    value = ["text-embedding-3-small"] if field == "embedding_pools" else {"text-embedding-3-small": ["http://x"]}
    with pytest.raises(ValidationError, match="unknown embedding pools"):
        Settings(**{field: value})


@pytest.mark.parametrize("field", ["rerank_pools", "rerank_worker_urls"])
def test_an_unknown_rerank_pool_is_refused(field: str) -> None:
    value = ["rerank-english-v3.0"] if field == "rerank_pools" else {"rerank-english-v3.0": ["http://x"]}
    with pytest.raises(ValidationError, match="unknown re-rank pools"):
        Settings(**{field: value})

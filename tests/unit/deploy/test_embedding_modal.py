"""The deployed embedding pool (gpu_workers/modal_app.py): one GPU Modal Server per embedding pool running
`vllm serve --runner pooling` under the pool's name, its knobs from shared/fleet/embedding_pools.py, and the gateway
told its URL. Checked offline on the app's objects (no Modal account here)."""

from __future__ import annotations

import warnings
from typing import Any

import modal
from modal.exception import DeprecationError

from gpu_workers import modal_app
from shared.fleet.tables import tables

POOL = tables().embedding_pools["text-embedding-minilm"]


def test_each_embedding_pool_is_a_registered_gpu_server_named_by_the_pool() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationError)
        registered = set(modal_app.app.registered_functions)
    assert "TextEmbeddingMinilmWorker" in registered
    server = modal_app.EMBEDDING_WORKERS[POOL.name]
    assert isinstance(server, modal.Server)
    assert modal_app.__dict__["TextEmbeddingMinilmWorker"] is server  # a module global, as Modal deploys it
    info = server.info()
    assert info.gpus == [(POOL.deployed.gpu, 1)]
    assert info.port == modal_app.VLLM_PORT and info.unauthenticated is False  # proxy auth: only the gateway
    assert info.secrets == [f"modal.Secret.from_name('{modal_app.WORKER_SECRET_NAME}')"]  # vLLM's --api-key
    assert set(info.volumes) == {modal_app.HF_CACHE_PATH, modal_app.VLLM_CACHE_PATH}  # weights cached across starts


def test_the_server_runs_vllms_pooling_runner_on_the_pinned_model_under_the_pool_name() -> None:
    command = modal_app.vllm_pooling_command(POOL)
    assert command[:3] == ["vllm", "serve", "sentence-transformers/all-MiniLM-L6-v2"]
    flags = dict(zip(command[3::2], command[4::2], strict=True))
    assert flags == {
        "--revision": POOL.deployed.revision,
        "--runner": "pooling",
        "--served-model-name": "text-embedding-minilm",
        "--host": "0.0.0.0",
        "--port": str(modal_app.VLLM_PORT),
        "--max-model-len": "256",
    }


def test_the_autoscaling_knobs_come_from_the_pool_table() -> None:
    class Recording:
        def __init__(self) -> None:
            self.kwargs: dict[str, Any] = {}

        def server(self, **kwargs: Any) -> Any:
            self.kwargs = kwargs
            return lambda cls: cls

    spec = modal_app.EMBEDDING_SPECS[POOL.name]
    recording = Recording()
    modal_app.define_worker(recording, spec, modal_app.VllmEmbeddingServer)  # type: ignore[arg-type]
    deployed = POOL.deployed
    knobs = {k: recording.kwargs[k] for k in ("gpu", "min_containers", "max_containers", "scaledown_window")}
    assert knobs == {
        "gpu": deployed.gpu,
        "min_containers": deployed.min_containers,
        "max_containers": deployed.max_containers,
        "scaledown_window": deployed.scaledown_window_s,
    }
    assert recording.kwargs["target_concurrency"] == deployed.max_concurrent_inputs


def test_the_gateway_gets_one_url_per_embedding_pool() -> None:
    resolved = {}

    def fake_url(class_name: str) -> str:
        resolved[class_name] = f"https://fleetchat--{class_name.lower()}.modal.run"
        return resolved[class_name]

    original = modal_app.server_url
    modal_app.server_url = fake_url  # type: ignore[assignment]
    try:
        urls = modal_app.resolve_embedding_worker_urls()
    finally:
        modal_app.server_url = original  # type: ignore[assignment]
    assert urls == {POOL.name: ["https://fleetchat--textembeddingminilmworker.modal.run"]}

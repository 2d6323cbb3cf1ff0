"""Run one worker process: load the engine for a pool and serve it over HTTP until stopped."""

from __future__ import annotations

import logging

import uvicorn

from gpu_workers.registry import EngineOptions, build_engine
from gpu_workers.server.app import create_worker_app
from shared.operator_config import install_from_environment
from shared.settings import Settings
from shared.tracing import trace_server, tracer_provider

log = logging.getLogger("fleetchat.worker")


def run_worker(pool: str, host: str, port: int, options: EngineOptions, *, log_level: str = "warning") -> None:
    install_from_environment()  # FLEETCHAT_CONFIG_FILE's pools, so a pool the file defines can be served
    settings = Settings()  # the process's entry point: FLEETCHAT_WORKER_API_KEY(S), FLEETCHAT_TRACING_*
    accepted = settings.worker.accepted_keys()
    if not accepted:
        log.warning("no FLEETCHAT_WORKER_API_KEY: this worker answers anyone who reaches %s:%d", host, port)
    engine = build_engine(pool, options)
    app = create_worker_app(engine, accepted_keys=accepted)
    # The gateway's trace goes on into the engine's request (W3C traceparent on every worker call).
    provider = tracer_provider(settings.tracing, "worker", f"{pool}@{host}:{port}")
    trace_server(app, provider)
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5)
    finally:
        engine.shutdown()
        provider.shutdown()  # export the spans still batched

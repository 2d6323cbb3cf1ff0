"""Run one worker process: load the engine for a pool and serve it over HTTP until stopped."""

from __future__ import annotations

import uvicorn

from gpu_workers.registry import EngineOptions, build_engine
from gpu_workers.server.app import create_worker_app
from shared.operator_config import install_from_environment


def run_worker(pool: str, host: str, port: int, options: EngineOptions, *, log_level: str = "warning") -> None:
    install_from_environment()  # FLEETCHAT_CONFIG_FILE's pools, so a pool the file defines can be served
    engine = build_engine(pool, options)
    app = create_worker_app(engine)
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5)
    finally:
        engine.shutdown()

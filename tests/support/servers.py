"""Run an ASGI app under uvicorn in a background thread, on a real loopback port (functions/offline/measure/
in_thread_server.py, shared with the benchmark's stand-ins)."""

from __future__ import annotations

from functions.offline.measure.in_thread_server import serve

__all__ = ["serve"]

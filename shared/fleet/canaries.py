"""A pool's canary: another model version served beside the stable one, with a share of the traffic and the
thresholds of its automatic rollback (docs/canary.md)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CanarySpec(BaseModel):
    """`FLEETCHAT_CANARIES='{"flagship": {"version": "Qwen/Qwen2.5-14B-Instruct@<sha>", "weight": 0.05,
    "worker_urls": ["https://...canary..."]}}'`."""

    # What the canary replicas serve, as GET /v1/models reports versions: `hf_repo@revision` deployed,
    # `package/file.gguf` locally. Recorded with every answer it gives.
    version: str = Field(min_length=1, max_length=200)
    weight: float = Field(gt=0.0, lt=1.0)  # the share of conversations (and of session-less requests) it gets
    worker_urls: list[str] = Field(min_length=1)  # its replicas (they serve the pool's name, like the stable ones)
    # Rolled back when its error rate exceeds the stable version's by more than this, over the window, once it has
    # answered at least min_requests in the window.
    error_margin: float = Field(default=0.05, ge=0.0, le=1.0)
    window_s: float = Field(default=300.0, gt=0, le=86_400)
    min_requests: int = Field(default=20, ge=1, le=100_000)

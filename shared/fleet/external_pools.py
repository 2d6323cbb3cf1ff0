"""External pools: hosted OpenAI-compatible endpoints (another provider, another team's vLLM) that serve a tier or act
as the judge like a pool of our own, declared in the operator config file (docs/configuration.md).

The table is empty unless the operator's file declares some. The API key is never in the file: `api_key_env` names the
environment variable (a Modal secret's key when deployed) that holds it, read at each call so a rotated secret applies
without a restart.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, Field

from shared.fleet.pools import TokenPrice
from shared.wire.schemas import ModelPricing

# Fields only vLLM (our workers) understands: a hosted OpenAI-compatible API refuses unknown stream options.
_VLLM_STREAM_OPTIONS = ("continuous_usage_stats",)


class ExternalEndpoint(BaseModel):
    """Where the hosted model answers: `base_url` includes `/v1` (`https://api.openai.com/v1`)."""

    base_url: str = Field(pattern=r"^https?://\S+$")
    model: str = Field(min_length=1)  # the provider's model id; clients still ask for the pool's name
    # The environment variable holding the API key (None: the endpoint needs no key, e.g. a vLLM on a private network).
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


class ExternalPool(BaseModel):
    name: str
    description: str
    external: ExternalEndpoint
    # Prompt + completion tokens the hosted model accepts: the gateway's admission bounds requests by it.
    max_model_len: int = Field(ge=256)
    price: TokenPrice  # what a million tokens cost us at the provider (the spend-rate metric)
    list_price: ModelPricing | None = None  # what the customer pays; unset: the API shows none

    def upstream_request(
        self, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[str, dict[str, Any], dict[str, str]]:
        """The URL, body and headers of a call to the endpoint: the provider's model id, its key, no vLLM extensions
        and none of our routing headers (a conversation id is not the provider's business)."""
        url = self.external.base_url.rstrip("/") + path.removeprefix("/v1")
        sent = {**body, "model": self.external.model}
        if isinstance(sent.get("stream_options"), dict):
            options = {k: v for k, v in sent["stream_options"].items() if k not in _VLLM_STREAM_OPTIONS}
            sent["stream_options"] = options
        key = self.external.api_key()
        return url, sent, ({"authorization": f"Bearer {key}"} if key else {})

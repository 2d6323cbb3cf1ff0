"""The GPU bench phase's parts on this CPU: fp8 rounding, n-gram speculation and the report, with a tiny random
Llama over SmolLM2's real tokenizer (the measured numbers come from a lent GPU,
`functions/offline/bench/engine/gpu_runs/`)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from functions.offline.bench.engine import cuda_phase
from functions.offline.bench.engine.deployed_options import GPU_RUNS
from gpu_workers.llama_cpp.gguf_tokenizer import load_tokenizer
from gpu_workers.model_loader import packaged_gguf_source
from shared.fleet.pools import LocalModel

PUBLIC = Path(__file__).resolve().parents[3] / "functions/offline/safety_training/data/public"


@pytest.fixture(scope="module")
def tokenizer() -> object:
    source = packaged_gguf_source(LocalModel())
    return load_tokenizer(Path(source.path_or_repo) / str(source.gguf_file))


@pytest.fixture(scope="module")
def tiny_model(tokenizer: object) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),  # type: ignore[arg-type]
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        eos_token_id=tokenizer.eos_token_id,  # type: ignore[attr-defined]
        pad_token_id=tokenizer.eos_token_id,  # type: ignore[attr-defined]
    )
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("per_channel", [False, True])
def test_fp8_rounding_moves_each_weight_by_at_most_e4m3s_step(per_channel: bool) -> None:
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 16), torch.nn.Linear(16, 8), torch.nn.Linear(8, 4))
    before = copy.deepcopy(model)
    assert cuda_phase.fp8_round_trip(model, per_channel=per_channel) == 2
    assert torch.equal(model[0].weight, before[0].weight), "only linear layers are rounded"
    for new, old in ((model[1].weight, before[1].weight), (model[2].weight, before[2].weight)):
        peak = old.abs().amax(dim=1, keepdim=True) if per_channel else old.abs().max()
        # e4m3 keeps 3 mantissa bits: a relative step of 2^-3, so rounding moves a value by at most 2^-4 of its
        # magnitude (below the smallest normal, by at most half of e4m3's smallest subnormal step, times the scale).
        bound = torch.maximum(old.abs() / 16, peak / 448 * 2**-10)
        assert ((new - old).abs() <= bound + 1e-12).all()
        assert not torch.equal(new, old)


def test_public_prompts_are_the_first_user_turns_of_each_set() -> None:
    sets = cuda_phase.public_prompts(PUBLIC, per_set=3)
    assert set(sets) == set(cuda_phase.NGRAM_SETS)
    for conversations in sets.values():
        assert len(conversations) == 3
        assert all(len(c) == 1 and c[0]["role"] == "user" and c[0]["content"] for c in conversations)


def test_ngram_speculation_keeps_greedy_outputs_in_fp32(tiny_model: torch.nn.Module, tokenizer: object) -> None:
    result = cuda_phase.ngram_part(tiny_model, tokenizer, PUBLIC, quick=True)
    assert set(result["sets"]) == set(cuda_phase.NGRAM_SETS)
    for row in result["sets"].values():
        assert row["identical_outputs"] == row["prompts"] == 2, "prompt lookup only proposes; greedy verifies"
        assert row["plain_tok_s"] > 0 and row["ngram_tok_s"] > 0


def test_fp8_part_compares_both_scalings_with_the_unrounded_model(
    tiny_model: torch.nn.Module, tokenizer: object
) -> None:
    weights = [p.detach().clone() for p in tiny_model.parameters()]
    result = cuda_phase.fp8_part(tiny_model, tokenizer, quick=True)
    assert all(torch.equal(a, b) for a, b in zip(weights, tiny_model.parameters(), strict=True)), "a copy is rounded"
    assert result["linear_layers_rounded"] == 2 * 7  # q, k, v, o, gate, up, down per layer; not the head
    for scales in ("per_tensor", "per_channel"):
        assert result[scales]["prompts"] == len(cuda_phase.measure.PARITY_PROMPTS)


def test_the_report_has_every_part_of_the_kept_gpu_run_and_names_failures() -> None:
    run = json.loads(sorted(GPU_RUNS.glob("*.json"))[-1].read_text())
    report = cuda_phase.render(run)
    for text in ("NVIDIA H200", "64 streams", "| 8192 | 64 |", "cnn-dailymail", "per_tensor scales", "greedy parity"):
        assert text in report
    failed = {**run, "ngram": {"error": "RuntimeError: out of memory"}}
    assert "N-gram speculation: failed: RuntimeError: out of memory" in cuda_phase.render(failed)

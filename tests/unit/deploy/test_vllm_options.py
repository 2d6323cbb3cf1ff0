"""Deployed pools' vLLM options become `vllm serve` flags (the pool table is the one place they are set)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from shared.fleet.tables import tables
from shared.fleet.vllm_options import DraftSpeculation, NgramSpeculation, VllmOptions


def test_defaults_add_no_flag() -> None:
    assert VllmOptions().flags() == []


def test_ngram_speculation_quantisation_and_batch_tokens_become_flags() -> None:
    flags = VllmOptions(
        speculative=NgramSpeculation(num_speculative_tokens=5), quantization="fp8", max_num_batched_tokens=4096
    ).flags()
    config = json.loads(flags[flags.index("--speculative-config") + 1])
    assert config == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    assert flags[flags.index("--quantization") + 1] == "fp8"
    assert flags[flags.index("--max-num-batched-tokens") + 1] == "4096"


def test_a_draft_model_is_named_with_its_revision() -> None:
    spec = DraftSpeculation(model="Qwen/Qwen2.5-0.5B-Instruct", revision="abc123")
    config = json.loads(VllmOptions(speculative=spec).flags()[1])
    assert config["model"] == "Qwen/Qwen2.5-0.5B-Instruct" and config["revision"] == "abc123"


def test_the_options_are_validated_from_plain_data() -> None:
    parsed = VllmOptions.model_validate({"speculative": {"method": "ngram"}, "quantization": "fp8"})
    assert isinstance(parsed.speculative, NgramSpeculation)
    with pytest.raises(ValidationError):
        VllmOptions.model_validate({"quantization": "int3"})
    with pytest.raises(ValidationError):
        VllmOptions.model_validate({"speculative": {"method": "medusa"}})


def test_the_serve_command_carries_each_pools_options() -> None:
    pytest.importorskip("modal")
    from gpu_workers.modal_app import vllm_serve_command

    tuned = [pool for pool in tables().pools.values() if pool.deployed.vllm.flags()]
    assert tuned, "the pool table sets vLLM options for at least one pool"
    for pool in tuned:
        flags = pool.deployed.vllm.flags()
        assert vllm_serve_command(pool)[-len(flags) :] == flags

"""Every sampling parameter on the real SmolLM2 GGUF: llama.cpp's C sampler chain against the numpy reference steps
(vLLM's order and meanings) on the same logits, token for token when greedy and in distribution when sampled; then
the engine's handling of ignore_eos, min_tokens, stop_token_ids and log-probabilities."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gpu_workers.engine import EngineOutput, SamplingParams
from gpu_workers.llama_cpp.engine import LlamaEngine
from gpu_workers.llama_cpp.runtime import LlamaRuntime
from gpu_workers.llama_cpp.sampling import RequestSampler, draw_distribution, processed_logits
from gpu_workers.model_loader import packaged_gguf_source
from shared.fleet.pools import LocalModel

pytestmark = pytest.mark.slow

PROMPT_TEXT = "Write a short poem about the sea and the wind over the sea."


def gguf() -> Path:
    source = packaged_gguf_source(LocalModel())
    return Path(source.path_or_repo) / str(source.gguf_file)


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaEngine]:
    built = LlamaEngine(gguf(), model_name="mini", kv_cache_tokens=4096, show_progress=False)
    yield built
    built.shutdown()


@pytest.fixture(scope="module")
def runtime() -> Iterator[LlamaRuntime]:
    rt = LlamaRuntime(gguf(), kv_cache_tokens=2048, max_batch_tokens=512, max_sequences=4, threads=2)
    yield rt
    rt.close()


def prompt(engine: LlamaEngine, text: str = PROMPT_TEXT) -> list[int]:
    return engine.tokenize_chat([{"role": "user", "content": text}])


@pytest.mark.parametrize(
    "fields",
    [
        {"repetition_penalty": 1.3},
        {"frequency_penalty": 1.5, "presence_penalty": 0.8},
        {"logit_bias": {4910: 8.0, 260: -100.0}},  # " sea" pulled up, " the" banned
        {"repetition_penalty": 0.8, "frequency_penalty": -0.5, "logit_bias": {30: 3.0}},
    ],
)
def test_greedy_with_bias_and_penalties_matches_the_reference_token_for_token(
    runtime: LlamaRuntime, engine: LlamaEngine, fields: dict[str, object]
) -> None:
    ids = prompt(engine)
    params = SamplingParams(max_tokens=24, temperature=0, **fields)  # type: ignore[arg-type]
    sampler = RequestSampler(runtime, params, prompt=ids, matcher=None, eos_ids=())
    runtime.forget(0)
    index = runtime.decode([(0, 0, ids, True)])[0]
    output: list[int] = []
    unchanged = True
    for step in range(params.max_tokens):
        raw = runtime.logits(index)
        expected = int(np.argmax(processed_logits(raw, params, prompt=ids, output=output, ban=())))
        unchanged = unchanged and int(np.argmax(raw)) == expected
        token, _ = sampler.pick(runtime, index)
        assert token == expected, f"step {step}: the C chain chose {token}, the reference {expected}"
        output.append(token)
        index = runtime.decode([(0, len(ids) + step, [token], True)])[0]
    runtime.forget(0)
    assert not unchanged, "the parameters never changed a greedy choice: the test proves nothing"


def test_a_sampled_token_follows_the_reference_distribution(runtime: LlamaRuntime, engine: LlamaEngine) -> None:
    """3,000 seeded draws of the C chain from one logits row against the reference probabilities after bias,
    repetition penalty over the prompt, temperature, min-p, top-k and top-p."""
    ids = prompt(engine, "Name an animal.")
    fields = {"temperature": 1.3, "top_k": 12, "min_p": 0.01, "top_p": 0.95, "repetition_penalty": 1.2}
    params = SamplingParams(max_tokens=4, logit_bias={9690: 2.0}, **fields)  # type: ignore[arg-type]
    runtime.forget(0)
    index = runtime.decode([(0, 0, ids, True)])[0]
    expected = draw_distribution(processed_logits(runtime.logits(index), params, prompt=ids, output=[], ban=()), params)
    draws = Counter()
    for seed in range(3000):
        sampler = RequestSampler(
            runtime, params.model_copy(update={"seed": seed}), prompt=ids, matcher=None, eos_ids=()
        )
        draws[sampler.pick(runtime, index)[0]] += 1
    runtime.forget(0)
    support = set(np.flatnonzero(expected).tolist())
    assert 2 <= len(support) <= 12
    assert set(draws) <= support, f"drawn outside the reference's support: {set(draws) - support}"
    observed = np.zeros_like(expected)
    for token, count in draws.items():
        observed[token] = count / 3000
    assert 0.5 * np.abs(observed - expected).sum() < 0.04  # total variation; ~0.02 expected from 3,000 draws


async def run(engine: LlamaEngine, ids: list[int], params: SamplingParams) -> tuple[list[int], list[EngineOutput]]:
    tokens: list[int] = []
    outs: list[EngineOutput] = []
    async for out in engine.generate(f"s-{time.time_ns()}", ids, params):
        tokens += out.new_token_ids
        outs.append(out)
    return tokens, outs


def test_ignore_eos_and_min_tokens_keep_generating_past_the_end(engine: LlamaEngine) -> None:
    ids = prompt(engine, "Reply with the single word: yes")
    _, outs = asyncio.run(run(engine, ids, SamplingParams(max_tokens=80, temperature=0)))
    natural = outs[-1].generated_total
    assert outs[-1].finish_reason == "stop" and natural < 60
    _, ignoring = asyncio.run(run(engine, ids, SamplingParams(max_tokens=80, temperature=0, ignore_eos=True)))
    assert ignoring[-1].finish_reason == "length" and ignoring[-1].generated_total == 80
    floor = natural + 5
    _, floored = asyncio.run(run(engine, ids, SamplingParams(max_tokens=80, temperature=0, min_tokens=floor)))
    assert floored[-1].generated_total > floor  # the end-of-sequence token could come only after `floor` tokens


def test_a_stop_token_id_ends_the_answer_before_that_token(engine: LlamaEngine) -> None:
    ids = prompt(engine)
    tokens, _ = asyncio.run(run(engine, ids, SamplingParams(max_tokens=12, temperature=0)))
    stop_at = tokens[4]
    cut, outs = asyncio.run(run(engine, ids, SamplingParams(max_tokens=12, temperature=0, stop_token_ids=[stop_at])))
    assert cut == tokens[: tokens.index(stop_at)]
    assert outs[-1].finish_reason == "stop"


def test_log_probabilities_are_the_models_and_greedy_picks_the_best(engine: LlamaEngine) -> None:
    ids = prompt(engine)
    tokens, outs = asyncio.run(run(engine, ids, SamplingParams(max_tokens=10, temperature=0, logprobs=5)))
    entries = [entry for out in outs for entry in out.logprobs or []]
    assert [e.token_id for e in entries] == tokens
    for entry in entries:
        assert entry.top[0] == (entry.token_id, pytest.approx(entry.logprob))
        values = [lp for _, lp in entry.top]
        assert values == sorted(values, reverse=True) and len(values) == 5
        assert sum(math.exp(v) for v in values) <= 1.0 + 1e-9


def test_a_constrained_answer_takes_the_same_parameters_in_numpy(engine: LlamaEngine) -> None:
    """Structured output samples in numpy after the grammar mask: penalties, top-k and log-probabilities apply there
    too, and the answer still parses."""
    import json

    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}
    ids = prompt(engine, "Name a city as JSON.")
    params = SamplingParams(
        max_tokens=40, temperature=0.7, seed=5, top_k=5, frequency_penalty=0.5, json_schema=schema, logprobs=2
    )
    tokens, outs = asyncio.run(run(engine, ids, params))
    assert isinstance(json.loads(engine.decode(tokens))["city"], str)
    entries = [entry for out in outs for entry in out.logprobs or []]
    assert [e.token_id for e in entries] == tokens and all(len(e.top) == 2 for e in entries)


def test_prompt_log_probabilities_match_a_chunked_decode_by_hand(runtime: LlamaRuntime) -> None:
    """A 300-token prompt prefilled in 64-token chunks scores every token as decoding the same chunks by hand does,
    every position once, none shifted; asked again, it reads no prefix cache (a cached prefix has no logits)."""
    from gpu_workers.llama_cpp.sampling import logprobs_of

    small = LlamaEngine(gguf(), model_name="mini", kv_cache_tokens=2048, max_batch_tokens=64, show_progress=False)
    params = SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=2)
    try:
        ids = small.tokenize(" ".join(f"Station {i} lies north of the river." for i in range(40)))[:300]
        _, first = asyncio.run(run(small, ids, params))
        _, again = asyncio.run(run(small, ids, params))
    finally:
        small.shutdown()
    entries = first[0].prompt_logprobs
    assert entries is not None and len(entries) == len(ids) and entries[0] is None
    assert [e.token_id for e in entries[1:] if e is not None] == ids[1:]
    assert all(len(e.top) == 2 for e in entries[1:] if e is not None)
    runtime.forget(0)
    reference: list[float] = []
    for start in range(0, len(ids), 64):
        chunk = ids[start : start + 64]
        runtime.decode([(0, start, chunk, True)], frozenset({0}))
        for j in range(len(chunk)):
            if start + j + 1 < len(ids):
                reference.append(logprobs_of(runtime.logits(j), ids[start + j + 1], 2).logprob)
    runtime.forget(0)
    scored = [e.logprob for e in entries[1:] if e is not None]
    assert max(abs(a - b) for a, b in zip(scored, reference, strict=True)) < 1e-4
    assert again[-1].cached_tokens == 0 and len(again[0].prompt_logprobs or []) == len(ids)

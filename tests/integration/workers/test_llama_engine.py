"""The llama.cpp engine on the real SmolLM2 GGUF, through the `Engine` protocol: prefix reuse and `cached_tokens`,
abort, per-request seeds, constrained JSON, preemption when the KV cache is full, and the same prompts as the
transformers engine's tokenizer."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_workers.engine import EngineError, SamplingParams
from gpu_workers.llama_cpp.engine import LlamaEngine
from gpu_workers.llama_cpp.gguf_weights import weights_for
from gpu_workers.model_loader import packaged_gguf_source
from shared.fleet.pools import LocalModel

pytestmark = pytest.mark.slow

SYSTEM = " ".join(f"Rule {i}: answer politely, briefly and only about trains." for i in range(40))


def gguf() -> Path:
    source = packaged_gguf_source(LocalModel())
    return Path(source.path_or_repo) / str(source.gguf_file)


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaEngine]:
    weights = weights_for(gguf(), LocalModel().llama_weights)  # the layout the pool table serves
    built = LlamaEngine(
        gguf(),
        model_name="mini",
        kv_cache_tokens=8192,
        show_progress=False,
        weights=weights,
        decode_lane=LocalModel().llama_decode_lane,  # as the pool table serves
    )
    yield built
    built.shutdown()


async def run(engine: LlamaEngine, ids: list[int], params: SamplingParams, rid: str = "") -> tuple[list[int], Any]:
    tokens: list[int] = []
    last = None
    async for out in engine.generate(rid or f"t-{time.time_ns()}", ids, params):
        tokens += out.new_token_ids
        last = out
    return tokens, last


def chat(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


async def test_a_shared_prefix_is_reused_and_reported_as_cached_tokens(engine: LlamaEngine) -> None:
    before = engine.stats()
    first = engine.tokenize_chat(chat("Which train goes to Porto?"))
    _, cold = await run(engine, first, SamplingParams(max_tokens=4, temperature=0))
    second = engine.tokenize_chat(chat("Is there a night train to Madrid?"))
    _, warm = await run(engine, second, SamplingParams(max_tokens=4, temperature=0))
    assert cold.cached_tokens == 0
    shared = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    assert shared - 16 < warm.cached_tokens <= shared  # every whole block of the common prefix
    assert warm.cached_tokens % 16 == 0
    after = engine.stats()
    assert after.prefix_cache_queries - before.prefix_cache_queries == len(first) + len(second)
    assert after.prefix_cache_hits - before.prefix_cache_hits == warm.cached_tokens


async def test_a_finished_answer_is_a_prefix_of_the_next_turn(engine: LlamaEngine) -> None:
    messages = chat("Name one Spanish city.")
    ids = engine.tokenize_chat(messages)
    answer, _ = await run(engine, ids, SamplingParams(max_tokens=12, temperature=0))
    follow = [*messages, {"role": "assistant", "content": engine.decode(answer)}, {"role": "user", "content": "Why?"}]
    next_ids = engine.tokenize_chat(follow)
    _, reply = await run(engine, next_ids, SamplingParams(max_tokens=2, temperature=0))
    assert reply.cached_tokens >= len(ids) - 16  # the whole previous prompt, at least


async def test_closing_the_stream_aborts_the_request(engine: LlamaEngine) -> None:
    ids = engine.tokenize_chat([{"role": "user", "content": "Tell me a very long story about a lighthouse."}])
    stream = engine.generate("abort-me", ids, SamplingParams(max_tokens=500, temperature=0.7))
    seen = 0
    async for out in stream:
        seen += len(out.new_token_ids)
        if seen >= 3:
            break
    await stream.aclose()
    deadline = time.monotonic() + 30
    while engine.stats().running and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert engine.stats().running == 0


async def test_a_seed_makes_sampling_reproducible_even_in_a_batch(engine: LlamaEngine) -> None:
    """Each request draws from its own seeded generator: two identical requests in the same batch get the same answer.
    (The same request alone can get another one: llama.cpp's logits depend on the batch, see the next test.)"""
    ids = engine.tokenize_chat([{"role": "user", "content": "Invent a name for a cat."}])
    params = SamplingParams(max_tokens=12, temperature=1.0, seed=1234)
    assert (await run(engine, ids, params))[0] == (await run(engine, ids, params))[0]
    other = SamplingParams(max_tokens=12, temperature=1.0, seed=99)
    together = await asyncio.gather(run(engine, ids, params), run(engine, ids, other), run(engine, ids, params))
    assert together[0][0] == together[2][0]


def test_logits_depend_on_what_shares_the_batch() -> None:
    """Why the result cache does not store seeded answers of local pools (functions/chat/result_cache/cache.py): with
    one unified KV pool, llama.cpp computes a prompt's logits differently alone and beside other sequences in one batch
    (by tenths of a logit, enough to change a sampled token; llama.cpp #24962). If this ever fails, llama.cpp became
    batch-invariant and seeded answers could be cached locally."""
    import numpy as np

    from gpu_workers.llama_cpp.runtime import LlamaRuntime

    rt = LlamaRuntime(gguf(), kv_cache_tokens=2048, max_batch_tokens=512, max_sequences=8, threads=2)
    try:
        prompt = [1, 9690, 198] + [1000 + 7 * j for j in range(60)]
        alone = rt.logits(rt.decode([(0, 0, prompt, True)])[0])
        rt.forget(0)
        others = [(k, 0, [1, 9690, 198] + [2000 + 11 * k + j for j in range(40)], False) for k in range(1, 4)]
        beside = rt.logits(rt.decode([*others, (0, 0, prompt, True)])[0])
    finally:
        rt.close()
    assert np.abs(alone - beside).max() > 1e-3


async def test_a_json_schema_constrains_the_answer(engine: LlamaEngine) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}, "stops": {"type": "integer"}},
        "required": ["city", "stops"],
        "additionalProperties": False,
    }
    ids = engine.tokenize_chat([{"role": "user", "content": "Give a train trip as JSON."}])
    tokens, last = await run(engine, ids, SamplingParams(max_tokens=60, temperature=0, json_schema=schema))
    assert last.finish_reason == "stop"
    value = json.loads(engine.decode(tokens))
    assert set(value) == {"city", "stops"} and isinstance(value["stops"], int)


async def test_requests_beyond_the_kv_cache_are_preempted_and_still_complete() -> None:
    small = LlamaEngine(gguf(), model_name="mini", kv_cache_tokens=1024, max_running=4, show_progress=False)
    try:
        rules = " ".join(f"Rule {i}: answer politely and only about trains." for i in range(25))
        prompts = [
            small.tokenize_chat(
                [
                    {"role": "system", "content": f"Station {i}. {rules}"},
                    {"role": "user", "content": "Describe your station at length."},
                ]
            )
            for i in range(4)
        ]
        # Three prompts fit at once, their answers do not: the youngest is preempted and recomputed later.
        assert 3 * max(len(p) for p in prompts) < 1024 < 3 * (min(len(p) for p in prompts) + 64)
        results = await asyncio.gather(
            *(run(small, ids, SamplingParams(max_tokens=64, temperature=0.5, seed=i)) for i, ids in enumerate(prompts))
        )
        for tokens, last in results:
            assert last.finished and last.generated_total == len(tokens) + (last.finish_reason == "stop")
        assert small.stats().running == 0
    finally:
        small.shutdown()


async def test_bad_prompt_ids_are_refused_before_the_batch(engine: LlamaEngine) -> None:
    with pytest.raises(EngineError):
        await run(engine, [1, 2, 10**9], SamplingParams(max_tokens=2))
    tokens, _ = await run(
        engine,
        engine.tokenize_chat([{"role": "user", "content": "Describe your station at length."}]),
        SamplingParams(max_tokens=2),
    )
    assert tokens is not None  # the engine still serves


def test_prompts_are_the_transformers_engines_token_for_token(engine: LlamaEngine) -> None:
    from transformers import AutoTokenizer

    from gpu_workers.chat_template import chat_prompt_ids

    path = gguf()
    reference = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    partial = [{"role": "user", "content": "Count to five."}, {"role": "assistant", "content": "One, two,"}]
    for messages, generation, continuing in ((chat("Hello?"), True, False), (partial, False, True)):
        ours = engine.tokenize_chat(messages, add_generation_prompt=generation, continue_final=continuing)
        theirs = chat_prompt_ids(reference, messages, add_generation_prompt=generation, continue_final=continuing)
        assert ours == theirs


async def test_the_engine_runs_on_its_share_of_the_cores_while_another_generates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpu_workers.llama_cpp import core_share

    cores = core_share.host_cores()
    if cores < 2:
        pytest.skip("one core: nothing to share")
    monkeypatch.setattr(core_share, "default_directory", lambda: tmp_path)
    built = LlamaEngine(gguf(), model_name="mini", kv_cache_tokens=2048, show_progress=False)
    other = tmp_path / f"{os.getpid()}-another-engine"  # another engine's marker (this process: alive)
    stop = threading.Event()

    def generate_elsewhere() -> None:  # the other engine steps: it touches its marker
        while not stop.is_set():
            other.touch()
            time.sleep(0.005)

    ids = built.tokenize_chat([{"role": "user", "content": "Name a colour."}])
    elsewhere = threading.Thread(target=generate_elsewhere)
    try:
        await run(built, ids, SamplingParams(max_tokens=4, temperature=0))
        assert built._runtime.threads == cores, "alone: every core"
        elsewhere.start()
        await asyncio.sleep(0.05)
        tokens, last = await run(built, ids, SamplingParams(max_tokens=4, temperature=0))
        assert built._runtime.threads == cores // 2, "with another engine generating: half"
        assert len(tokens) == 4 and last.finished
    finally:
        stop.set()
        if elsewhere.is_alive():
            elsewhere.join()
        built.shutdown()
    assert [p.name for p in tmp_path.iterdir()] == [other.name], "its own marker is removed at shutdown"

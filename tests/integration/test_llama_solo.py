"""The llama.cpp engine's solo lane on the real SmolLM2 GGUF: a request running alone moves to a second context and
back without changing its tokens, makes room for newcomers, can be aborted there, and leaves its prompt and answer in
the prefix cache."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_workers.engine import SamplingParams
from gpu_workers.gguf_weights import weights_for
from gpu_workers.kv_blocks import KvBlocks
from gpu_workers.llama_engine import LlamaEngine
from gpu_workers.llama_solo import SoloLane
from gpu_workers.model_loader import packaged_gguf_source
from shared.pools import LocalModel

pytestmark = pytest.mark.slow

QUESTIONS = ("Name three rivers in Europe.", "Write one sentence about autumn.", "What is a prime number?")


def _engine(solo_lane: bool) -> LlamaEngine:
    source = packaged_gguf_source(LocalModel())
    gguf = Path(source.path_or_repo) / str(source.gguf_file)
    weights = weights_for(gguf, LocalModel().llama_weights)
    return LlamaEngine(
        gguf, model_name="mini", kv_cache_tokens=4096, weights=weights, solo_lane=solo_lane, show_progress=False
    )


@pytest.fixture(scope="module")
def engines() -> Iterator[tuple[LlamaEngine, LlamaEngine]]:
    with_lane, without = _engine(True), _engine(False)
    yield with_lane, without
    with_lane.shutdown()
    without.shutdown()


async def _greedy(engine: LlamaEngine, question: str, max_tokens: int = 24, rid: str = "") -> list[int]:
    ids = engine.tokenize_chat([{"role": "user", "content": question}])
    tokens: list[int] = []
    params = SamplingParams(max_tokens=max_tokens, temperature=0)
    async for out in engine.generate(rid or f"solo-{question}", ids, params):
        tokens += out.new_token_ids
    return tokens


async def test_a_lone_request_decodes_in_the_lane_with_the_same_tokens(
    engines: tuple[LlamaEngine, LlamaEngine],
) -> None:
    with_lane, without = engines
    entered = with_lane._scheduler.solo_entries
    for question in QUESTIONS:
        assert await _greedy(with_lane, question) == await _greedy(without, question)
    assert with_lane._scheduler.solo_entries - entered == len(QUESTIONS)
    assert without._scheduler.solo_entries == 0


async def test_a_newcomer_brings_the_lone_request_back_into_the_batch(
    engines: tuple[LlamaEngine, LlamaEngine],
) -> None:
    with_lane, without = engines
    expected = [await _greedy(without, q, 48) for q in QUESTIONS[:2]]
    first = asyncio.create_task(_greedy(with_lane, QUESTIONS[0], 48, rid="first"))
    while with_lane.stats().running == 0:  # the first one is alone, in the lane, when the second arrives
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    second = await _greedy(with_lane, QUESTIONS[1], 48, rid="second")
    # Back in the main context beside another sequence, its logits are computed in a batch of two: greedy tokens
    # may differ from a lone run's there (test_llama_engine.py: logits depend on what shares the batch), but both
    # answers complete, from the same start.
    answers = [await first, second]
    for got, want in zip(answers, expected, strict=True):
        assert got[:4] == want[:4] and len(got) >= 4


async def test_a_request_in_the_lane_can_be_aborted(engines: tuple[LlamaEngine, LlamaEngine]) -> None:
    with_lane, _ = engines
    ids = with_lane.tokenize_chat([{"role": "user", "content": "Tell me a very long story about a lighthouse."}])
    stream = with_lane.generate("abort-me", ids, SamplingParams(max_tokens=400, temperature=0))
    received = 0
    async for _ in stream:
        received += 1
        if received == 5:
            break
    await stream.aclose()
    for _ in range(200):
        if with_lane.stats().running == 0:
            break
        await asyncio.sleep(0.02)
    assert with_lane.stats().running == 0
    entered = with_lane._scheduler.solo_entries
    assert await _greedy(with_lane, QUESTIONS[2], 8)  # the lane is free for the next lone request
    assert with_lane._scheduler.solo_entries == entered + 1


async def test_the_lanes_answer_is_cached_for_the_next_turn(engines: tuple[LlamaEngine, LlamaEngine]) -> None:
    with_lane, _ = engines
    messages = [{"role": "user", "content": "Name one Portuguese city and say why it is famous."}]
    ids = with_lane.tokenize_chat(messages)
    answer: list[int] = []
    async for out in with_lane.generate("turn-1", ids, SamplingParams(max_tokens=40, temperature=0)):
        answer += out.new_token_ids
    follow = [*messages, {"role": "assistant", "content": with_lane.decode(answer)}]
    follow.append({"role": "user", "content": "Why?"})
    cached = 0
    async for out in with_lane.generate("turn-2", with_lane.tokenize_chat(follow), SamplingParams(max_tokens=2)):
        cached = out.cached_tokens
    assert cached >= len(ids) + len(answer) - 32  # the prompt and the answer decoded in the lane, whole blocks


class _FullMain:
    """A main context with no free cells: importing a sequence back fails."""

    def __init__(self) -> None:
        self.forgotten: list[int] = []

    def forget(self, seq: int) -> None:
        self.forgotten.append(seq)

    def import_seq(self, seq: int, state: bytes) -> None:
        raise ValueError("failed to restore sequence state")


class _Lane:
    kv_cache_tokens = 4096

    def export_seq(self, seq: int) -> bytes:
        return b"state"

    def forget(self, seq: int) -> None:
        pass


class _Job:
    def __init__(self) -> None:
        self.tokens, self.seq, self.n_past, self.prompt_len = list(range(40)), 7, 39, 30


def test_no_room_to_come_back_means_recompute_not_loss() -> None:
    blocks = KvBlocks(1024, 16)
    job = _Job()
    blocks.extend(job.seq, job.tokens[:32])
    lane = SoloLane(_Lane())  # type: ignore[arg-type]
    lane.job = job
    main = _FullMain()
    lane.leave(main, blocks)  # type: ignore[arg-type]
    assert lane.job is None and job.n_past == 0 and job.tokens == list(range(40)), "the answer so far is kept"
    assert blocks.tokens_of(job.seq) == 0 and main.forgotten == [7, 7]

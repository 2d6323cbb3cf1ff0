"""The llama.cpp engine's decode lane on the real SmolLM2 GGUF: requests whose prompt is done move to a second context
and back without changing their tokens, batch there with each other while newcomers prefill in the main context, can
be aborted there, leave their prompt and answer in the prefix cache, and stay in the main context when the lane has no
room for them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_workers.engine import SamplingParams
from gpu_workers.llama_cpp.decode_lane import HEADROOM, DecodeLane
from gpu_workers.llama_cpp.engine import LlamaEngine
from gpu_workers.llama_cpp.gguf_weights import weights_for
from gpu_workers.llama_cpp.kv_blocks import KvBlocks
from gpu_workers.llama_cpp.runtime import KvCacheFullError
from gpu_workers.model_loader import packaged_gguf_source
from shared.fleet.pools import LocalModel

pytestmark = pytest.mark.slow

QUESTIONS = ("Name three rivers in Europe.", "Write one sentence about autumn.", "What is a prime number?")
# Asked by one test only: a prompt another test cached may have been prefilled in a batch with others, whose
# rounding differs from a lone prefill's, so later greedy tokens could part for that reason alone.
FRESH_QUESTION = "Describe a sunrise over the sea in one sentence."


def _engine(decode_lane: bool, lane_tokens: int = 4096) -> LlamaEngine:
    source = packaged_gguf_source(LocalModel())
    gguf = Path(source.path_or_repo) / str(source.gguf_file)
    weights = weights_for(gguf, LocalModel().llama_weights)
    return LlamaEngine(
        gguf,
        model_name="mini",
        kv_cache_tokens=4096,
        weights=weights,
        decode_lane=decode_lane,
        decode_lane_kv_tokens=lane_tokens,
        show_progress=False,
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
    async for out in engine.generate(rid or f"lane-{question}", ids, params):
        tokens += out.new_token_ids
    return tokens


async def test_a_lone_request_decodes_in_the_lane_with_the_same_tokens(
    engines: tuple[LlamaEngine, LlamaEngine],
) -> None:
    with_lane, without = engines
    entered = with_lane._scheduler.lane_entries
    for question in QUESTIONS:
        assert await _greedy(with_lane, question) == await _greedy(without, question)
    assert with_lane._scheduler.lane_entries - entered == len(QUESTIONS)
    assert without._scheduler.lane_entries == 0


async def test_requests_at_once_batch_in_the_lane(engines: tuple[LlamaEngine, LlamaEngine]) -> None:
    with_lane, without = engines
    entered = with_lane._scheduler.lane_entries
    lane = with_lane._scheduler._lane
    assert lane is not None
    decode, rows_per_step = lane.runtime.decode, []

    def counted(rows: list) -> list[int]:
        rows_per_step.append(len(rows))
        return decode(rows)

    lane.runtime.decode = counted  # type: ignore[method-assign]
    try:
        together = await asyncio.gather(
            *(_greedy(with_lane, q, 32, rid=f"together-{i}") for i, q in enumerate(QUESTIONS))
        )
    finally:
        lane.runtime.decode = decode  # type: ignore[method-assign]
    assert max(rows_per_step) == len(QUESTIONS), "one llama_decode for all three"
    alone = await asyncio.gather(*(_greedy(without, q, 32, rid=f"alone-{i}") for i, q in enumerate(QUESTIONS)))
    assert with_lane._scheduler.lane_entries - entered == len(QUESTIONS), "each one, once its prompt was done"
    # Logits of a batch depend on what shares it (test_llama_engine.py), so greedy tokens of two batched runs may part
    # after a while; both start alike and complete.
    for got, want in zip(together, alone, strict=True):
        assert got[:4] == want[:4] and len(got) >= 4


async def test_a_newcomer_prefills_beside_the_lane_and_joins_it(engines: tuple[LlamaEngine, LlamaEngine]) -> None:
    with_lane, without = engines
    expected = [await _greedy(without, q, 48) for q in QUESTIONS[:2]]
    entered = with_lane._scheduler.lane_entries
    first = asyncio.create_task(_greedy(with_lane, QUESTIONS[0], 48, rid="first"))
    while with_lane._scheduler.lane_entries == entered:  # the first one decodes in the lane when the second arrives
        await asyncio.sleep(0.005)
    second = await _greedy(with_lane, QUESTIONS[1], 48, rid="second")
    answers = [await first, second]
    assert with_lane._scheduler.lane_entries - entered == 2
    for got, want in zip(answers, expected, strict=True):
        assert got[:4] == want[:4] and len(got) >= 4


async def test_a_request_in_the_lane_can_be_aborted(engines: tuple[LlamaEngine, LlamaEngine]) -> None:
    with_lane, _ = engines
    ids = with_lane.tokenize_chat([{"role": "user", "content": "Tell me a very long story about a lighthouse."}])
    entered = with_lane._scheduler.lane_entries
    stream = with_lane.generate("abort-me", ids, SamplingParams(max_tokens=400, temperature=0))
    received = 0
    async for _ in stream:
        received += 1
        if received == 5:
            break
    assert with_lane._scheduler.lane_entries == entered + 1, "it was decoding in the lane"
    await stream.aclose()
    for _ in range(200):
        if with_lane.stats().running == 0:
            break
        await asyncio.sleep(0.02)
    assert with_lane.stats().running == 0
    assert with_lane._scheduler._lane.jobs == [], "its slot is free"  # type: ignore[union-attr]
    entered = with_lane._scheduler.lane_entries
    assert await _greedy(with_lane, QUESTIONS[2], 8)  # the lane has room for the next request
    assert with_lane._scheduler.lane_entries == entered + 1


async def test_the_lanes_answer_is_cached_for_the_next_turn(engines: tuple[LlamaEngine, LlamaEngine]) -> None:
    with_lane, _ = engines
    messages = [{"role": "user", "content": "Name one Portuguese city and say why it is famous."}]
    ids = with_lane.tokenize_chat(messages)
    entered = with_lane._scheduler.lane_entries
    answer: list[int] = []
    async for out in with_lane.generate("turn-1", ids, SamplingParams(max_tokens=40, temperature=0)):
        answer += out.new_token_ids
    assert with_lane._scheduler.lane_entries == entered + 1, "the answer was decoded in the lane"
    follow = [*messages, {"role": "assistant", "content": with_lane.decode(answer)}]
    follow.append({"role": "user", "content": "Why?"})
    cached = 0
    async for out in with_lane.generate("turn-2", with_lane.tokenize_chat(follow), SamplingParams(max_tokens=2)):
        cached = out.cached_tokens
    assert cached >= len(ids) + len(answer) - 32  # the prompt and the answer decoded in the lane, whole blocks


async def test_a_request_the_lane_cannot_hold_decodes_in_the_main_context() -> None:
    small, without = _engine(True, lane_tokens=64), _engine(False)
    try:
        question = "Explain in a few sentences how a lighthouse works and why ships need one at night."
        lane_cells = small._scheduler._lane.runtime.kv_cache_tokens  # type: ignore[union-attr]
        prompt = small.tokenize_chat([{"role": "user", "content": question}])
        assert len(prompt) + HEADROOM > lane_cells, "llama.cpp rounds a context up, not this far"
        assert await _greedy(small, question, 600) == await _greedy(without, question, 600)
        assert small._scheduler.lane_entries == 0, "the answer it may write outgrows the lane's cells"
    finally:
        small.shutdown()
        without.shutdown()


async def test_a_lane_step_without_cells_sends_its_requests_back(engines: tuple[LlamaEngine, LlamaEngine]) -> None:
    with_lane, without = engines
    lane = with_lane._scheduler._lane
    assert lane is not None
    decode = lane.runtime.decode

    def no_cells(rows: object) -> list[int]:
        raise KvCacheFullError("decode: failed to find a memory slot (KV slot)")

    entered = with_lane._scheduler.lane_entries
    lane.runtime.decode = no_cells  # type: ignore[method-assign]
    try:
        got = await _greedy(with_lane, FRESH_QUESTION, 24, rid="no-cells")
    finally:
        lane.runtime.decode = decode  # type: ignore[method-assign]
    assert got == await _greedy(without, FRESH_QUESTION, 24), "finished in the main context, nothing lost"
    assert with_lane._scheduler.lane_entries - entered == 1, "handed over once, not again step after step"
    assert await _greedy(with_lane, QUESTIONS[2], 8) and with_lane._scheduler.lane_entries - entered == 2


class _FullMain:
    """A main context with no free cells: importing a sequence fails."""

    def __init__(self) -> None:
        self.forgotten: list[int] = []

    def forget(self, seq: int) -> None:
        self.forgotten.append(seq)

    def export_seq(self, seq: int) -> bytes:
        return b"state"

    def import_seq(self, seq: int, state: bytes) -> None:
        raise ValueError("failed to restore sequence state")

    def copy_prefix(self, src: int, dst: int, n_tokens: int) -> None:
        raise AssertionError("nothing was imported to share")


class _LaneContext:
    def __init__(self, kv_cache_tokens: int = 4096, fragmented: bool = False) -> None:
        self.kv_cache_tokens, self.fragmented = kv_cache_tokens, fragmented

    def export_seq(self, seq: int) -> bytes:
        return b"state"

    def import_seq(self, seq: int, state: bytes) -> None:
        if self.fragmented:
            raise ValueError("failed to find available cells in kv cache")

    def forget(self, seq: int) -> None:
        pass


class _Job:
    def __init__(self, seq: int = 7, tokens: int = 40, prompt_len: int = 30) -> None:
        self.tokens, self.seq, self.n_past, self.prompt_len = list(range(tokens)), seq, tokens - 1, prompt_len


def _in_lane(lane: DecodeLane, blocks: KvBlocks, job: _Job) -> None:
    blocks.extend(job.seq, job.tokens[: job.n_past])  # what the main context holds when it enters
    assert lane.enter(_FullMain(), job, max_tokens=20)  # type: ignore[arg-type]
    job.tokens += [1, 2, 3]  # it decodes three more tokens there
    job.n_past += 3


def test_no_room_to_come_back_means_recompute_not_loss() -> None:
    blocks = KvBlocks(1024, 16)
    lane = DecodeLane(_LaneContext(), slots=4)  # type: ignore[arg-type]
    job = _Job()
    _in_lane(lane, blocks, job)
    main = _FullMain()
    lane.leave(main, blocks, job)  # type: ignore[arg-type]
    assert not lane.holds(job) and job.tokens == [*range(40), 1, 2, 3], "the answer so far is kept"
    assert job.n_past == 0 and blocks.tokens_of(job.seq) == 0 and main.forgotten == [7, 7]


def test_the_lane_takes_what_fits_and_refuses_the_rest() -> None:
    lane = DecodeLane(_LaneContext(kv_cache_tokens=100), slots=2)  # type: ignore[arg-type]
    main = _FullMain()
    first = _Job(1)  # 40 tokens now, 10 written of at most 20: 50 cells wanted
    assert lane.can_take(first, max_tokens=20) and lane.enter(main, first, max_tokens=20)  # type: ignore[arg-type]
    assert not lane.can_take(first, max_tokens=20), "already there"
    assert not lane.can_take(_Job(2), max_tokens=21), "51 more cells than the 50 left"
    prefilling = _Job(5)
    prefilling.n_past = 20
    assert not lane.can_take(prefilling, max_tokens=10), "its prompt is not done"
    roomy = DecodeLane(_LaneContext(kv_cache_tokens=10_000), slots=2)  # type: ignore[arg-type]
    for seq in (1, 2):
        assert roomy.enter(main, _Job(seq), max_tokens=20)  # type: ignore[arg-type]
    assert not roomy.can_take(_Job(3), max_tokens=20), "both slots taken"


def test_a_request_without_max_tokens_counts_only_its_headroom() -> None:
    lane = DecodeLane(_LaneContext(kv_cache_tokens=2 * (40 + HEADROOM)), slots=4)  # type: ignore[arg-type]
    main = _FullMain()
    for seq in (1, 2):  # max_tokens left to the model's whole context, as a client that sets none gets
        assert lane.can_take(_Job(seq), max_tokens=8192) and lane.enter(main, _Job(seq), max_tokens=8192)  # type: ignore[arg-type]
    assert not lane.can_take(_Job(3), max_tokens=8192)


def test_a_lane_outgrown_sends_its_youngest_back() -> None:
    lane = DecodeLane(_LaneContext(kv_cache_tokens=100), slots=4)  # type: ignore[arg-type]
    old, young = _Job(1, tokens=40), _Job(2, tokens=40)
    for job in (old, young):
        assert lane.enter(_FullMain(), job, max_tokens=8192)  # type: ignore[arg-type]
    assert lane.overflow() is None
    old.n_past, young.n_past = 49, 49  # 98 cells held, 2 needed for the next step: full, not over
    assert lane.overflow() is None
    young.n_past = 50
    assert lane.overflow() is young


def test_fragmented_lane_cells_leave_the_request_where_it_was() -> None:
    context = _LaneContext()
    lane = DecodeLane(context, slots=3)  # type: ignore[arg-type]
    inside = _Job(1)
    assert lane.enter(_FullMain(), inside, max_tokens=20)  # type: ignore[arg-type]
    context.fragmented = True
    job = _Job(2)
    assert lane.can_take(job, max_tokens=20)
    assert not lane.enter(_FullMain(), job, max_tokens=20)  # type: ignore[arg-type]
    assert not lane.holds(job) and lane.entries == 1 and job.n_past == 39
    assert not lane.can_take(_Job(3), max_tokens=20), "not tried again, step after step"
    lane.drop(inside)  # a job leaving frees cells: worth another try
    assert lane.can_take(_Job(3), max_tokens=20)

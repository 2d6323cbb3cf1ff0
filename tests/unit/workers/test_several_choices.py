"""n > 1 in the worker (gpu_workers/server/chat_serving.py; per prompt, completion_serving.py): the followers start
only after the leader's first step, and when one choice fails (or the client goes away) every other choice's run is
closed at once, so no sequence keeps generating for nobody."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace

import pytest

from gpu_workers.engine import EngineError, SamplingParams
from gpu_workers.server.chat_serving import ChatServing, PreparedChat
from gpu_workers.server.completion_serving import CompletionServing, PreparedPrompt
from gpu_workers.server.generation import RunStep


class ScriptedRuns:
    """Stands in for the engine's generation runs: endless steps, or a failure for the named request ids."""

    def __init__(self, failing: set[str], fail_before_first_step: bool = False) -> None:
        self.failing = failing
        self.fail_before_first_step = fail_before_first_step
        self.started: list[str] = []
        self.closed: set[str] = set()

    async def run(self, prepared: PreparedChat) -> AsyncIterator[RunStep]:
        self.started.append(prepared.request_id)
        try:
            if prepared.request_id in self.failing and self.fail_before_first_step:
                raise EngineError("the KV cache is full")
            for generated in range(1, 10_000):
                await asyncio.sleep(0.002)
                if prepared.request_id in self.failing and generated == 3:
                    raise EngineError("the KV cache is full")
                yield RunStep("x", None, generated, 0)
        finally:
            self.closed.add(prepared.request_id)


def serving_with(runs: ScriptedRuns) -> ChatServing:
    serving = ChatServing.__new__(ChatServing)
    serving.engine = SimpleNamespace(model_name="m")  # type: ignore[assignment]
    serving.generation = runs  # type: ignore[assignment]
    return serving


def prepared(n: int) -> PreparedChat:
    return PreparedChat("chatcmpl-1", [1, 2, 3], SamplingParams(max_tokens=10_000, seed=5), [], None, n=n)


def test_choices_get_their_own_request_ids_and_seeds() -> None:
    runs = prepared(3).choices()
    assert [r.request_id for r in runs] == ["chatcmpl-1", "chatcmpl-1-1", "chatcmpl-1-2"]
    assert [r.params.seed for r in runs] == [5, 6, 7]


def closed_when_it_failed(runs: ScriptedRuns, answer: Callable[[], Awaitable[object]]) -> set[str]:
    """The runs closed by the time the failure reached the caller (not later, when the event loop shuts down)."""

    async def call() -> set[str]:
        with pytest.raises(EngineError):
            await answer()
        return set(runs.closed)

    return asyncio.run(call())


def test_a_failing_follower_fails_the_answer_and_closes_every_other_run() -> None:
    runs = ScriptedRuns({"chatcmpl-1-2"})
    closed = closed_when_it_failed(runs, lambda: serving_with(runs)._collect_all(prepared(4)))
    assert runs.started[0] == "chatcmpl-1" and len(runs.started) == 4
    assert closed == set(runs.started)  # none goes on generating


def test_a_leader_that_fails_before_its_first_step_starts_no_follower() -> None:
    runs = ScriptedRuns({"chatcmpl-1"}, fail_before_first_step=True)
    with pytest.raises(EngineError):
        asyncio.run(serving_with(runs)._collect_all(prepared(4)))
    assert runs.started == ["chatcmpl-1"]


def test_a_stream_whose_reader_leaves_closes_every_run() -> None:
    runs = ScriptedRuns(set())

    async def read_a_little() -> None:
        async with contextlib.aclosing(serving_with(runs)._all_deltas(prepared(3))) as deltas:
            seen = set()
            async for index, _ in deltas:
                seen.add(index)
                if seen == {0, 1, 2}:
                    break

    async def closed_when_it_left() -> set[str]:
        await read_a_little()
        return set(runs.closed)

    closed = asyncio.run(closed_when_it_left())
    assert len(runs.started) == 3 and closed == set(runs.started)


def test_a_failing_follower_fails_the_stream_and_closes_every_other_run() -> None:
    runs = ScriptedRuns({"chatcmpl-1-1"})

    async def read_all() -> None:
        async with contextlib.aclosing(serving_with(runs)._all_deltas(prepared(3))) as deltas:
            async for _ in deltas:
                pass

    assert closed_when_it_failed(runs, read_all) == set(runs.started)


# -- /v1/completions: n choices per prompt (gpu_workers/server/completion_serving.py) ---------------------------------
def completion_serving_with(runs: ScriptedRuns) -> CompletionServing:
    serving = CompletionServing.__new__(CompletionServing)
    serving.engine = SimpleNamespace(model_name="m")  # type: ignore[assignment]
    serving.generation = runs  # type: ignore[assignment]
    return serving


def completion_prompts(prompts: int, n: int) -> list[PreparedPrompt]:
    return [
        PreparedPrompt(
            f"cmpl-{p}" if i == 0 else f"cmpl-{p}-{i}", [1, 2, 3], SamplingParams(max_tokens=10_000), [], p * n + i,
            group=p, leader=i == 0,
        )
        for p in range(prompts)
        for i in range(n)
    ]  # fmt: skip


def test_each_prompts_followers_start_after_its_leaders_first_step() -> None:
    runs = ScriptedRuns(set())

    async def read_until_every_choice_spoke() -> list[int]:
        order: list[int] = []
        async with contextlib.aclosing(completion_serving_with(runs)._all_steps(completion_prompts(2, 3))) as steps:
            async for prompt, _ in steps:
                order.append(prompt.index)
                if set(order) == set(range(6)):
                    break
        return order

    order = asyncio.run(read_until_every_choice_spoke())
    for leader, followers in ((0, (1, 2)), (3, (4, 5))):
        assert all(order.index(leader) < order.index(f) for f in followers)
    assert set(runs.started) == {f"cmpl-{p}" + ("" if i == 0 else f"-{i}") for p in range(2) for i in range(3)}
    assert runs.closed == set(runs.started)  # the reader left: every run closed


def test_a_failing_completion_choice_fails_the_stream_and_closes_every_run() -> None:
    runs = ScriptedRuns({"cmpl-1-1"})

    async def read_all() -> None:
        async with contextlib.aclosing(completion_serving_with(runs)._all_steps(completion_prompts(2, 2))) as steps:
            async for _ in steps:
                pass

    assert closed_when_it_failed(runs, read_all) == set(runs.started)

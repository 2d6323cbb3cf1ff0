"""The embedding worker's micro-batcher: concurrent requests share one forward pass, each gets its own rows in order,
a pass never exceeds the batch bound (a request is never split), arrival order is kept, and an encoder failure
reaches exactly the requests of its pass. The encoder is a recording stand-in: the model is not the point here
(tests/integration/files/test_embeddings_api.py runs the real one)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from gpu_workers.embeddings.batcher import MicroBatcher


class RecordingEncoder:
    """Row i of a pass is [len(text), position in the pass]: enough to tell rows apart and see the batches."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.passes: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.passes.append(list(texts))
        if self.fail_on in texts:
            raise RuntimeError("encoder failed")
        return np.array([[len(text), i] for i, text in enumerate(texts)], dtype=np.float32)


async def _run(batcher: MicroBatcher, requests: list[list[str]]) -> list[np.ndarray | BaseException]:
    batcher.start()
    try:
        # Every request is queued before the batcher's task runs again: one gather round sees them all.
        return await asyncio.gather(*(batcher.embed(texts) for texts in requests), return_exceptions=True)
    finally:
        await batcher.stop()


def test_concurrent_requests_share_one_pass_and_get_their_own_rows() -> None:
    encoder = RecordingEncoder()
    requests = [["a"], ["bb", "ccc"], ["dddd"]]
    results = asyncio.run(_run(MicroBatcher(encoder, max_batch_inputs=8, max_wait_s=0.01), requests))
    assert encoder.passes == [["a", "bb", "ccc", "dddd"]]
    assert [row.tolist() for row in results[1]] == [[2.0, 1.0], [3.0, 2.0]]
    assert [[len(t) for t in texts] for texts in requests] == [[int(r[0]) for r in rows] for rows in results]


def test_a_pass_stays_within_the_bound_and_keeps_arrival_order() -> None:
    encoder = RecordingEncoder()
    requests = [["a", "b"], ["c", "d", "e"], ["f"], ["g", "h"]]
    results = asyncio.run(_run(MicroBatcher(encoder, max_batch_inputs=4, max_wait_s=0.01), requests))
    assert encoder.passes == [["a", "b"], ["c", "d", "e", "f"], ["g", "h"]]
    assert all(len(rows) == len(texts) for rows, texts in zip(results, requests, strict=True))


def test_a_request_over_the_bound_runs_alone_unsplit() -> None:
    encoder = RecordingEncoder()
    results = asyncio.run(_run(MicroBatcher(encoder, max_batch_inputs=2), [["a", "b", "c"], ["d"]]))
    assert encoder.passes == [["a", "b", "c"], ["d"]]
    assert len(results[0]) == 3


def test_a_failing_pass_fails_only_its_requests_and_the_batcher_goes_on() -> None:
    encoder = RecordingEncoder(fail_on="boom")
    requests = [["ok"], ["boom"], ["x", "y"]]
    results = asyncio.run(_run(MicroBatcher(encoder, max_batch_inputs=2, max_wait_s=0.01), requests))
    assert encoder.passes == [["ok", "boom"], ["x", "y"]]
    assert isinstance(results[0], RuntimeError) and isinstance(results[1], RuntimeError)
    assert len(results[2]) == 2


@pytest.mark.parametrize("max_batch", [1, 3])
def test_with_max_batch_one_every_request_is_its_own_pass(max_batch: int) -> None:
    encoder = RecordingEncoder()
    asyncio.run(_run(MicroBatcher(encoder, max_batch_inputs=max_batch, max_wait_s=0.01), [["a"], ["b"], ["c"]]))
    assert len(encoder.passes) == (3 if max_batch == 1 else 1)

"""The embedding worker's micro-batcher: concurrent requests are gathered into one forward pass.

Each request's inputs join a queue; one task takes the first waiting request, then every other request that is
waiting or arrives within `max_wait_s`, up to `max_batch_inputs` inputs (a request is never split: a larger one runs
alone), runs the encoder once in a thread, and hands each request its rows. While a pass runs, new requests queue,
so under load the next pass starts at once with all of them. docs/embeddings.md has the measurement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from anyio import to_thread

Encode = Callable[[list[str]], np.ndarray]
BatchObserver = Callable[[int, int], None]  # (requests, inputs) of each forward pass


@dataclass
class _Job:
    texts: list[str]
    future: asyncio.Future[np.ndarray] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class MicroBatcher:
    def __init__(
        self,
        encode: Encode,
        *,
        max_batch_inputs: int = 64,
        max_wait_s: float = 0.002,
        observe: BatchObserver = lambda _requests, _inputs: None,
    ) -> None:
        self._encode = encode
        self.max_batch_inputs = max_batch_inputs
        self.max_wait_s = max_wait_s
        self._observe = observe
        self._queue: asyncio.Queue[_Job] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._next: _Job | None = None  # a request that did not fit the last pass: first in the next one
        self.running = 0  # inputs in the forward pass now (the worker's running-requests gauge)

    @property
    def waiting(self) -> int:
        return self._queue.qsize() + (self._next is not None)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="embedding-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def embed(self, texts: list[str]) -> np.ndarray:
        """The rows for `texts`, computed in some forward pass shared with other requests."""
        job = _Job(texts)
        await self._queue.put(job)
        return await job.future

    async def _gather(self) -> list[_Job]:
        first, self._next = self._next, None
        jobs = [first if first is not None else await self._queue.get()]
        size = len(jobs[0].texts)
        deadline = asyncio.get_running_loop().time() + self.max_wait_s
        while size < self.max_batch_inputs:
            try:
                job = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    job = await asyncio.wait_for(self._queue.get(), remaining)
                except TimeoutError:
                    break
            if size + len(job.texts) > self.max_batch_inputs:
                self._next = job  # first in the next pass: arrival order is kept
                break
            jobs.append(job)
            size += len(job.texts)
        return [job for job in jobs if not job.future.cancelled()]  # a cancelled request costs no compute

    async def _run(self) -> None:
        while True:
            jobs = await self._gather()
            if not jobs:
                continue
            texts = [text for job in jobs for text in job.texts]
            self.running = len(texts)
            try:
                vectors = await to_thread.run_sync(self._encode, texts)
            except Exception as exc:  # the model failed: every request of this pass gets the error, the loop goes on
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(exc)
                continue
            finally:
                self.running = 0
            self._observe(len(jobs), len(texts))
            start = 0
            for job in jobs:
                rows = vectors[start : start + len(job.texts)]
                start += len(job.texts)
                if not job.future.done():
                    job.future.set_result(rows)

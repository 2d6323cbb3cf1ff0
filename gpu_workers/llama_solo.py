"""The solo lane: a request running alone decodes in a second llama.cpp context, on the same weights, whose KV cache
holds nothing else.

The main context's KV is one unified cell pool: running requests and the prefix cache's entries (finished requests
kept for their next turn) share it, and every decode step attends over the whole used range of it, masking other
sequences' cells. A server's pool fills with cache entries, so a lone stream pays for them: measured on 2 cores,
4,096 cells held by another sequence cost a single stream 25 % of its tokens/s, 12,288 cells 40 % (docs/engine.md).
When one request is left with nothing to prefill, its KV is copied into the lane (`llama_state_seq_get_data` and
`set_data`, ~10 ms per 250 tokens) and its tokens are decoded there; when another request arrives, or it ends, its KV,
answer included, is copied back, so the prefix cache still finds prompt and answer. Only the scheduler's thread calls
it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gpu_workers.kv_blocks import KvBlocks
from gpu_workers.llama_runtime import LlamaRuntime

LANE_SEQ = 0  # the lane's context holds one sequence


class SoloJob(Protocol):
    tokens: list[int]
    seq: int  # its sequence id in the main context
    n_past: int  # tokens of `tokens` in the KV cache (the lane's while it is there)
    prompt_len: int


@dataclass
class SoloLane:
    runtime: LlamaRuntime
    job: SoloJob | None = None
    entries: int = 0  # requests handed to the lane so far (tests read it)

    def can_take(self, job: SoloJob, max_tokens: int) -> bool:
        """Only the last sampled token is left to decode, and the whole answer fits the lane's context."""
        if self.job is not None or job.seq < 0 or len(job.tokens) - job.n_past != 1:
            return False
        remaining = max_tokens - (len(job.tokens) - job.prompt_len)
        return len(job.tokens) + remaining <= self.runtime.kv_cache_tokens

    def enter(self, main: LlamaRuntime, job: SoloJob) -> None:
        """Copy `job`'s KV from the main context into the lane; the main context keeps its copy meanwhile."""
        self.runtime.forget(LANE_SEQ)
        self.runtime.import_seq(LANE_SEQ, main.export_seq(job.seq))
        self.job = job
        self.entries += 1

    def decode_next(self) -> int:
        """Decode the job's pending token in the lane; returns the batch index its logits are at."""
        job = self.job
        assert job is not None
        (index,) = self.runtime.decode([(LANE_SEQ, job.n_past, job.tokens[job.n_past : job.n_past + 1], True)])
        job.n_past += 1
        return index

    def leave(self, main: LlamaRuntime, blocks: KvBlocks) -> None:
        """Copy the job's KV, answer so far included, back over its main-context sequence and update the bookkeeping.
        If the main context has no room for it, the job's KV is dropped there and recomputed by its next steps."""
        job = self.job
        assert job is not None
        state = self.runtime.export_seq(LANE_SEQ)
        self.runtime.forget(LANE_SEQ)
        self.job = None
        main.forget(job.seq)
        blocks.release(job.seq)
        try:
            main.import_seq(job.seq, state)
        except ValueError:  # no free cells for it: recompute (as after a preemption), the answer so far kept
            main.forget(job.seq)
            job.n_past = 0
            return
        blocks.extend(job.seq, job.tokens[: job.n_past])

    def drop(self) -> None:
        """Forget the job without copying anything back (it failed or the engine stops)."""
        self.runtime.forget(LANE_SEQ)
        self.job = None

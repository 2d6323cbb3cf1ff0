"""The decode lane: requests whose prompt is done decode in a second llama.cpp context, on the same weights, whose KV
holds only them.

The main context's KV is one unified cell pool: running requests and the prefix cache's entries (finished requests
kept for their next turn) share it, and every decode step attends over the whole used range of it, masking other
sequences' cells. A server's pool fills with cache entries, so its decodes pay for them: measured on 2 cores, 4,096
cells held by another sequence cost a single stream 25 % of its tokens/s, 12,288 cells 40 %, and 8 streams lost
20-40 % the same way (docs/engine.md). So once a request's prompt is in the cache and its first token sampled, its KV
is copied into the lane (`llama_state_seq_get_data` / `set_data`, ~10 ms per 250 tokens) and its tokens are decoded
there, batched with the lane's other requests; the main context goes on prefilling newcomers and serving the prefix
cache, and keeps its copy of the prompt meanwhile (newcomers still share it). When a request ends, its KV, answer
included, is copied back over that copy, so the prefix cache finds prompt and answer for the next turn. A request
that does not fit the lane (no free slot, or its prompt plus the answer it may still write outgrows the lane's cells)
stays in the main context. Only the scheduler's thread calls it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gpu_workers.kv_blocks import KvBlocks
from gpu_workers.llama_runtime import LlamaRuntime, Row


class LaneJob(Protocol):
    tokens: list[int]  # the prompt, then every generated token
    seq: int  # its sequence id in the main context
    n_past: int  # tokens of `tokens` in the KV cache (the lane's while it is there)
    prompt_len: int


@dataclass
class DecodeLane:
    runtime: LlamaRuntime
    slots: int  # sequences the lane's context holds at once
    entries: int = 0  # requests handed to the lane so far (tests and the bench read it)
    _jobs: dict[int, LaneJob] = field(default_factory=dict)  # lane sequence id -> job
    _reserved: dict[int, int] = field(default_factory=dict)  # lane sequence id -> cells it may come to hold

    def holds(self, job: LaneJob) -> bool:
        return any(held is job for held in self._jobs.values())

    @property
    def jobs(self) -> list[LaneJob]:
        return list(self._jobs.values())

    def can_take(self, job: LaneJob, max_tokens: int) -> bool:
        """A free slot, only the last sampled token left to decode, and cells for the whole answer it may write."""
        if len(self._jobs) >= self.slots or job.seq < 0 or len(job.tokens) - job.n_past != 1 or self.holds(job):
            return False
        return sum(self._reserved.values()) + _cells_needed(job, max_tokens) <= self.runtime.kv_cache_tokens

    def enter(self, main: LlamaRuntime, job: LaneJob, max_tokens: int) -> bool:
        """Copy `job`'s KV from the main context into the lane (the main context keeps its copy meanwhile). False,
        and nothing changed, if the lane's cells are too fragmented to take it: it decodes in the main context."""
        slot = next(s for s in range(self.slots) if s not in self._jobs)
        self.runtime.forget(slot)
        try:
            self.runtime.import_seq(slot, main.export_seq(job.seq))
        except ValueError:
            self.runtime.forget(slot)
            return False
        self._jobs[slot] = job
        self._reserved[slot] = _cells_needed(job, max_tokens)
        self.entries += 1
        return True

    def decode(self) -> list[tuple[LaneJob, int]]:
        """Decode every lane job's pending token in one llama_decode; returns each job with its logits' batch index.
        Raises KvCacheFullError (nothing applied) if the lane's cells ran out."""
        slots = list(self._jobs)
        rows: list[Row] = []
        for slot in slots:
            job = self._jobs[slot]
            rows.append((slot, job.n_past, job.tokens[job.n_past : job.n_past + 1], True))
        indices = self.runtime.decode(rows)
        for slot in slots:
            self._jobs[slot].n_past += 1
        return [(self._jobs[slot], index) for slot, index in zip(slots, indices, strict=True)]

    def leave(self, main: LlamaRuntime, blocks: KvBlocks, job: LaneJob) -> None:
        """Copy the job's KV, answer so far included, back over its main-context sequence and update the bookkeeping.
        If the main context has no room for it, the job's KV is dropped there and recomputed by its next steps."""
        slot = self._slot_of(job)
        state = self.runtime.export_seq(slot)
        self._release(slot)
        main.forget(job.seq)
        blocks.release(job.seq)
        try:
            main.import_seq(job.seq, state)
        except ValueError:  # no free cells for it: recompute (as after a preemption), the answer so far kept
            main.forget(job.seq)
            job.n_past = 0
            return
        blocks.extend(job.seq, job.tokens[: job.n_past])

    def drop(self, job: LaneJob) -> None:
        """Forget the job's lane KV without copying anything back (it is preempted or failed)."""
        self._release(self._slot_of(job))

    def drop_all(self) -> None:
        for slot in list(self._jobs):
            self._release(slot)

    def _slot_of(self, job: LaneJob) -> int:
        return next(slot for slot, held in self._jobs.items() if held is job)

    def _release(self, slot: int) -> None:
        self.runtime.forget(slot)
        del self._jobs[slot]
        del self._reserved[slot]


def _cells_needed(job: LaneJob, max_tokens: int) -> int:
    """The cells `job` holds now plus those the rest of its answer may take."""
    return len(job.tokens) + max(0, max_tokens - (len(job.tokens) - job.prompt_len))

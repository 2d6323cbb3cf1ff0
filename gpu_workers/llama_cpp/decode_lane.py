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
enters while the lane has a free slot and cells for it plus up to HEADROOM more tokens for each request there; one
that outgrows the lane later goes back to the main context with its answer so far (`overflow`). Only the scheduler's
thread calls it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gpu_workers.llama_cpp.kv_blocks import KvBlocks
from gpu_workers.llama_cpp.runtime import LlamaRuntime, Row

# Tokens of answer still to come that a request's entry counts for (not all of `max_tokens`: a client that sets none
# gets the model's whole context, which would keep every other request out of the lane).
HEADROOM = 256


class LaneJob(Protocol):
    tokens: list[int]  # the prompt, then every generated token
    seq: int  # its sequence id in the main context
    n_past: int  # tokens of `tokens` in the KV cache (the lane's while it is there)
    prompt_len: int


@dataclass
class _Held:
    job: LaneJob
    max_tokens: int


@dataclass
class DecodeLane:
    runtime: LlamaRuntime
    slots: int  # sequences the lane's context holds at once
    entries: int = 0  # requests handed to the lane so far (tests and the bench read it)
    _held: dict[int, _Held] = field(default_factory=dict)  # lane sequence id -> job, in the order they entered
    _fragmented: bool = False  # an entry failed for want of contiguous cells: none is tried until a job leaves

    def holds(self, job: LaneJob) -> bool:
        return any(held.job is job for held in self._held.values())

    @property
    def jobs(self) -> list[LaneJob]:
        """The jobs in the lane, oldest entry first."""
        return [held.job for held in self._held.values()]

    def can_take(self, job: LaneJob, max_tokens: int) -> bool:
        """A free slot, only the last sampled token left to decode, and cells for it plus headroom for everyone."""
        if self._fragmented or len(self._held) >= self.slots or job.seq < 0 or self.holds(job):
            return False
        if len(job.tokens) - job.n_past != 1:
            return False
        committed = sum(_cells_wanted(held.job, held.max_tokens) for held in self._held.values())
        return committed + _cells_wanted(job, max_tokens) <= self.runtime.kv_cache_tokens

    def enter(self, main: LlamaRuntime, job: LaneJob, max_tokens: int) -> bool:
        """Copy `job`'s KV from the main context into the lane (the main context keeps its copy meanwhile). False,
        and nothing changed, if the lane's cells are too fragmented to take it: it decodes in the main context."""
        slot = next(s for s in range(self.slots) if s not in self._held)
        self.runtime.forget(slot)
        try:
            self.runtime.import_seq(slot, main.export_seq(job.seq))
        except ValueError:
            self.runtime.forget(slot)
            self._fragmented = True
            return False
        self._held[slot] = _Held(job, max_tokens)
        self.entries += 1
        return True

    def overflow(self) -> LaneJob | None:
        """The job to send back before the next step when the lane has no cell left for every job's next token
        (the youngest entry), else None."""
        used = sum(held.job.n_past for held in self._held.values())
        if self._held and used + len(self._held) > self.runtime.kv_cache_tokens:
            return next(reversed(self._held.values())).job
        return None

    def decode(self) -> list[tuple[LaneJob, int]]:
        """Decode every lane job's pending token in one llama_decode; returns each job with its logits' batch index.
        Raises KvCacheFullError (nothing applied) if the lane's cells ran out."""
        slots = list(self._held)
        rows: list[Row] = []
        for slot in slots:
            job = self._held[slot].job
            rows.append((slot, job.n_past, job.tokens[job.n_past : job.n_past + 1], True))
        indices = self.runtime.decode(rows)
        for slot in slots:
            self._held[slot].job.n_past += 1
        return [(self._held[slot].job, index) for slot, index in zip(slots, indices, strict=True)]

    def leave(self, main: LlamaRuntime, blocks: KvBlocks, job: LaneJob) -> None:
        """Copy the job's KV, answer so far included, back over its main-context sequence and update the bookkeeping.
        If the main context has no room for it, the job's KV is dropped there and recomputed by its next steps (when
        it ends: not cached). What it shared there with other sequences (a system prompt) comes back as its own copy:
        sharing it again changed seeded answers (docs/engine.md, "The decode lane")."""
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
        for slot in list(self._held):
            self._release(slot)

    def _slot_of(self, job: LaneJob) -> int:
        return next(slot for slot, held in self._held.items() if held.job is job)

    def _release(self, slot: int) -> None:
        self.runtime.forget(slot)
        del self._held[slot]
        self._fragmented = False


def _cells_wanted(job: LaneJob, max_tokens: int) -> int:
    """The cells `job` holds now (or will, with its pending token) plus up to HEADROOM of the answer still to come."""
    remaining = max(0, max_tokens - (len(job.tokens) - job.prompt_len))
    return len(job.tokens) + min(remaining, HEADROOM)

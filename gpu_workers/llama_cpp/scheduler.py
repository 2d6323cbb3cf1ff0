"""The llama.cpp engine's step loop, on its own thread: continuous batching with chunked prefill.

Each step: admit waiting requests into free sequence slots (copying their longest cached prefix, `KvBlocks.match`),
then one `llama_decode` over every running sequence's next token plus prefill chunks up to `max_batch_tokens`, then
one token sampled per sequence whose prompt is done. A finished or cancelled sequence keeps its KV as a prefix-cache
entry (LRU) until its slot or its cells are needed. When cells run out, cache entries go first; then the youngest
running sequence is preempted and recomputed later (vLLM's recompute preemption), its answer so far kept. When there
is a decode lane (llama_decode_lane.py: a second context whose KV holds only running requests), a request whose prompt
is done decodes there, batched with the lane's others, in a second llama_decode of the same step; it comes back to the
main context, answer included, when it ends.

Requests come in and go out through thread-safe calls (`submit`, `cancel`); results go back through each job's
`emit`, called on this thread.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from gpu_workers.engine import EngineError, EngineOutput, EngineStats, SamplingParams, TokenLogprobs
from gpu_workers.llama_cpp.core_share import CoreShare
from gpu_workers.llama_cpp.decode_lane import DecodeLane
from gpu_workers.llama_cpp.kv_blocks import KvBlocks
from gpu_workers.llama_cpp.runtime import KvCacheFullError, LlamaRuntime, Row
from gpu_workers.llama_cpp.sampling import RequestSampler, logprobs_of

Emit = Callable[[EngineOutput | BaseException], None]
_order = itertools.count()


@dataclass(eq=False)
class Job:
    request_id: str
    tokens: list[int]  # the prompt, then every generated token
    params: SamplingParams
    emit: Emit
    matcher: object | None = None  # an llguidance matcher for a constrained request
    prompt_len: int = 0
    seq: int = -1  # llama.cpp sequence id while admitted
    n_past: int = 0  # tokens of `tokens` already in the KV cache
    cached_tokens: int = 0
    admitted: int = -1
    sampler: RequestSampler | None = field(default=None, repr=False)
    # Prompt log-probabilities (`params.prompt_logprobs`): one entry per prompt token, None for the first.
    prompt_entries: list[TokenLogprobs | None] | None = field(default=None, repr=False)
    prompt_entries_sent: bool = False

    def __post_init__(self) -> None:
        self.prompt_len = self.prompt_len or len(self.tokens)


class Scheduler:
    def __init__(
        self,
        runtime: LlamaRuntime,
        *,
        max_running: int,
        max_cached: int,
        eos_ids: set[int],
        max_model_len: int,
        page_size: int = 16,
        prefix_caching: bool = True,
        core_share: CoreShare | None = None,  # None: the runtime keeps the threads it was made with
        lane: LlamaRuntime | None = None,  # a second context on the same model, for requests whose prompt is done
    ) -> None:
        self._rt = runtime
        self._lane = DecodeLane(lane, slots=max_running) if lane is not None else None
        # Requests sent back from the lane (it outgrew them, or a lane step found no cells): they stay in the main
        # context until they end, instead of being handed over again step after step.
        self._lane_barred: set[str] = set()
        self._core_share = core_share
        self._blocks = KvBlocks(runtime.kv_cache_tokens, page_size)
        self._max_running = max_running
        self._eos_ids = eos_ids
        self._max_model_len = max_model_len
        self._prefix_caching = prefix_caching
        self._inbox: queue.SimpleQueue[tuple[str, Job | str | None]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._waiting: deque[Job] = deque()
        self._running: dict[str, Job] = {}
        self._cached: OrderedDict[int, None] = OrderedDict()  # sequence ids kept as prefix-cache entries, LRU first
        self._free_ids = list(range(max_running + max_cached))
        self._lock = threading.Lock()
        self._prefix_queries = 0
        self._prefix_hits = 0
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="llama-engine", daemon=True)
        self._thread.start()

    # -- called from other threads ----------------------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        self._inbox.put(("add", job))
        self._wake.set()

    def cancel(self, request_id: str) -> None:
        self._inbox.put(("cancel", request_id))
        self._wake.set()

    @property
    def lane_entries(self) -> int:
        """How many times a request was handed to the decode lane (0 without one)."""
        return self._lane.entries if self._lane is not None else 0

    def is_running(self) -> bool:
        return self._thread.is_alive() and not self._stopping

    def stats(self) -> EngineStats:
        with self._lock:
            return EngineStats(
                running=len(self._running),
                waiting=len(self._waiting) + self._inbox.qsize(),
                kv_cache_usage=min(1.0, self._blocks.used_tokens / self._blocks.capacity_tokens),
                prefix_cache_queries=self._prefix_queries,
                prefix_cache_hits=self._prefix_hits,
            )

    def stop(self, timeout: float = 10.0) -> None:
        self._inbox.put(("stop", None))
        self._wake.set()
        self._thread.join(timeout)
        if self._core_share is not None:
            self._core_share.close()

    # -- the engine thread ------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            if not self._running and not self._waiting and self._inbox.empty():
                self._wake.wait(0.5)
                self._wake.clear()
            if not self._drain_inbox():
                self._fail_all(EngineError("engine stopped"))
                return
            with self._lock:
                self._admit()
            if not self._running:
                continue
            try:
                self._step()
            except Exception as exc:  # never let one bad step kill the thread: fail what was in flight, go on
                self._fail_all(EngineError(f"generation failed: {exc}"))

    def _drain_inbox(self) -> bool:
        while True:
            try:
                kind, item = self._inbox.get_nowait()
            except queue.Empty:
                return True
            if kind == "stop":
                self._stopping = True
                return False
            with self._lock:
                if kind == "add" and isinstance(item, Job):
                    self._waiting.append(item)
                elif kind == "cancel":
                    self._drop(str(item))

    def _drop(self, request_id: str) -> None:
        job = self._running.get(request_id)
        if job is not None:
            self._retire(job)
            return
        self._waiting = deque(j for j in self._waiting if j.request_id != request_id)
        self._lane_barred.discard(request_id)

    def _admit(self) -> None:
        while self._waiting and len(self._running) < self._max_running:
            if not self._fits(self._waiting[0]):
                return  # it waits for running requests to finish (instead of being preempted over and over)
            seq = self._take_id()
            if seq is None:
                return
            job = self._waiting.popleft()
            job.seq, job.n_past = seq, 0
            first = job.admitted < 0
            job.admitted = next(_order)
            # A cached prefix has no logits: prompt log-probabilities are computed over the whole prompt (as vLLM).
            if self._prefix_caching and job.params.prompt_logprobs is None:
                src, n = self._blocks.match(job.tokens)
                if src is not None and n:
                    self._rt.copy_prefix(src, seq, n)
                    self._blocks.attach(seq, src, n)
                    job.n_past = n
                    if src in self._cached:
                        self._cached.move_to_end(src)
                if first:
                    job.cached_tokens = job.n_past
                    self._prefix_queries += job.prompt_len
                    self._prefix_hits += job.n_past
            if job.sampler is None:
                job.sampler = RequestSampler(
                    self._rt,
                    job.params,
                    prompt=job.tokens[: job.prompt_len],
                    matcher=job.matcher,  # type: ignore[arg-type]
                    eos_ids=self._eos_ids,
                )
            self._running[job.request_id] = job

    def _fits(self, job: Job) -> bool:
        """Whether the cells its uncached tokens need are free (after evicting cache entries); always, when alone."""
        cached = self._blocks.match(job.tokens)[1] if self._prefix_caching else 0
        need = len(job.tokens) - cached
        while self._blocks.free_tokens() < need and self._cached:
            self._evict_one()
        return self._blocks.free_tokens() >= need or not self._running

    def _take_id(self) -> int | None:
        if not self._free_ids and self._cached:
            self._evict_one()
        return self._free_ids.pop() if self._free_ids else None

    def _evict_one(self) -> None:
        seq, _ = self._cached.popitem(last=False)
        self._forget(seq)

    def _forget(self, seq: int) -> None:
        self._rt.forget(seq)
        self._blocks.release(seq)
        self._free_ids.append(seq)

    def _plan(self) -> list[tuple[Job, int, bool]]:
        """The main context's rows, (job, tokens to decode this step, whether its logits are wanted): decodes first,
        then prefill chunks. Jobs in the decode lane decode there."""
        budget = self._rt.max_batch_tokens
        jobs = sorted(self._in_main_context(), key=lambda j: (len(j.tokens) - j.n_past > 1, j.admitted))
        plan: list[tuple[Job, int, bool]] = []
        for job in jobs:
            pending = len(job.tokens) - job.n_past
            take = min(pending, budget)
            if take <= 0:
                break
            plan.append((job, take, take == pending))
            budget -= take
        return plan

    def _make_room(self, plan: list[tuple[Job, int, bool]]) -> list[tuple[Job, int, bool]]:
        """Free cells for this step: drop cache entries, then preempt the youngest running job (recomputed later)."""
        while plan and self._blocks.free_tokens() < sum(take for _, take, _ in plan):
            if self._cached:
                self._evict_one()
                continue
            # The youngest in the main context (preempting a lane job frees only its copy of the prompt here).
            youngest = max(self._in_main_context() or self._running.values(), key=lambda j: j.admitted)
            if len(self._running) == 1:
                raise EngineError("the prompt does not fit in the KV cache")
            self._preempt(youngest)
            plan = [entry for entry in plan if entry[0] is not youngest]
        return plan

    def _in_main_context(self) -> list[Job]:
        """The running jobs not decoding in the lane."""
        lane = self._lane
        return [j for j in self._running.values() if lane is None or not lane.holds(j)]

    def _preempt(self, job: Job) -> None:
        if self._lane is not None and self._lane.holds(job):
            self._lane.drop(job)
        del self._running[job.request_id]
        self._forget(job.seq)
        job.seq, job.n_past = -1, 0
        self._waiting.appendleft(job)

    def _step(self) -> None:
        with self._lock:
            self._enter_lane()
            self._relieve_lane()
            plan = self._make_room(self._plan())
        lane = self._lane
        if not plan and (lane is None or not lane.jobs):
            return
        if self._core_share is not None:
            threads = self._core_share.threads_for_step()
            self._rt.set_threads(threads)
            if lane is not None:
                lane.runtime.set_threads(threads)
        if plan:
            self._main_step(plan)
        if lane is not None and lane.jobs:
            self._lane_step(lane)

    def _main_step(self, plan: list[tuple[Job, int, bool]]) -> None:
        rows: list[Row] = [(j.seq, j.n_past, j.tokens[j.n_past : j.n_past + take], want) for j, take, want in plan]
        every = frozenset(i for i, (job, _, _) in enumerate(plan) if _scores_prompt(job))
        try:
            outputs = iter(self._rt.decode(rows, every))
        except KvCacheFullError:
            with self._lock:
                while self._cached:  # our count and llama.cpp's disagree (fragmentation): empty the cache, retry
                    self._evict_one()
            outputs = iter(self._rt.decode(rows, every))
        with self._lock:
            start = 0
            for position, (job, take, want) in enumerate(plan):
                if position in every:
                    self._score_prompt(job, start, take)
                start += take
                self._blocks.extend(job.seq, job.tokens[job.n_past : job.n_past + take])
                job.n_past += take
                if want:
                    self._sampled(job, *job.sampler.pick(self._rt, next(outputs)))  # type: ignore[union-attr]

    def _score_prompt(self, job: Job, start: int, take: int) -> None:
        """Log-probabilities of the prompt tokens this chunk's logits predict (each position's logits score the next
        prompt token; the last prompt position's score the first answer token, which the sampler reports)."""
        entries = job.prompt_entries
        if entries is None:
            entries = job.prompt_entries = [None]
        top = job.params.prompt_logprobs or 0
        for j in range(take):
            predicted = job.n_past + j + 1
            if predicted >= job.prompt_len or predicted < len(entries):  # past the prompt, or scored before a preempt
                continue
            raw = self._rt.logits(start + j)
            entries.append(logprobs_of(raw, job.tokens[predicted], top))

    def _enter_lane(self) -> None:
        """Hand each running job whose prompt is done (oldest first) to the decode lane, while it has room."""
        lane = self._lane
        if lane is None:
            return
        for job in sorted(self._running.values(), key=lambda j: j.admitted):
            if job.request_id in self._lane_barred:
                continue
            if lane.can_take(job, job.params.max_tokens) and not lane.enter(self._rt, job, job.params.max_tokens):
                return  # its cells are fragmented: the rest decode in the main context this step

    def _relieve_lane(self) -> None:
        """Send the lane's youngest jobs back to the main context while the lane has no cell for each job's next
        token (their answers outgrew the headroom they entered with)."""
        lane = self._lane
        while lane is not None and (job := lane.overflow()) is not None:
            self._send_back(job)  # type: ignore[arg-type]

    def _send_back(self, job: Job) -> None:
        """Out of the lane for the rest of its answer."""
        self._leave_lane(job)
        self._lane_barred.add(job.request_id)

    def _leave_lane(self, job: Job) -> None:
        """Back to the main context, answer so far included: older cache entries make room for its KV (so the next
        turn finds it), as they would for a newcomer's."""
        assert self._lane is not None
        while self._blocks.free_tokens() < job.n_past and self._cached:
            self._evict_one()
        self._lane.leave(self._rt, self._blocks, job)

    def _lane_step(self, lane: DecodeLane) -> None:
        try:
            decoded = lane.decode()
        except KvCacheFullError:  # (fragmented cells) back to the main context, answers so far kept
            with self._lock:
                for job in lane.jobs:
                    self._send_back(job)  # type: ignore[arg-type]
            return
        with self._lock:
            for job, index in decoded:
                if job.seq >= 0:  # (a cancel is only read between steps, on this thread)
                    self._sampled(job, *job.sampler.pick(lane.runtime, index))  # type: ignore[attr-defined]

    def _sampled(self, job: Job, token: int, logprobs: TokenLogprobs | None = None) -> None:
        job.tokens.append(token)
        generated = len(job.tokens) - job.prompt_len
        sampler = job.sampler
        stop = token in sampler.stop_ids if sampler is not None else token in self._eos_ids
        failure = sampler.failure if sampler is not None else None
        finished = stop or failure is not None or generated >= job.params.max_tokens
        finished = finished or len(job.tokens) >= self._max_model_len
        if failure is not None and finished:
            self._retire(job)
            _emit(job, EngineError(failure))
            return
        if finished:
            self._retire(job)
        _emit(
            job,
            EngineOutput(
                new_token_ids=[] if stop else [token],
                finished=finished,
                finish_reason=("stop" if stop else "length") if finished else None,
                cached_tokens=job.cached_tokens,
                generated_total=generated,
                logprobs=None if logprobs is None or stop else [logprobs],
                prompt_logprobs=_take_prompt_entries(job),
            ),
        )

    def _retire(self, job: Job) -> None:
        """A job leaves the batch (finished or cancelled); its KV stays as a prefix-cache entry if it holds a block."""
        if self._lane is not None and self._lane.holds(job):
            self._leave_lane(job)
        self._running.pop(job.request_id, None)
        self._lane_barred.discard(job.request_id)
        seq, job.seq = job.seq, -1
        if seq < 0:
            return
        if self._prefix_caching and self._blocks.tokens_of(seq) >= self._blocks.page_size:
            self._cached[seq] = None
            self._cached.move_to_end(seq)
        else:
            self._forget(seq)

    def _fail_all(self, error: EngineError) -> None:
        with self._lock:
            if self._lane is not None:
                self._lane.drop_all()
            self._lane_barred.clear()
            jobs = [*self._running.values(), *self._waiting]
            for job in list(self._running.values()):
                self._running.pop(job.request_id, None)
                if job.seq >= 0:
                    self._forget(job.seq)
            self._waiting.clear()
        for job in jobs:
            _emit(job, error)


def _scores_prompt(job: Job) -> bool:
    """Whether this step's chunk of `job` needs logits for every token (prompt log-probabilities not yet all had)."""
    scored = len(job.prompt_entries) if job.prompt_entries is not None else 0
    return job.params.prompt_logprobs is not None and job.n_past < job.prompt_len and scored < job.prompt_len


def _take_prompt_entries(job: Job) -> list[TokenLogprobs | None] | None:
    """The prompt's entries, handed out once (with the first output)."""
    if job.prompt_entries_sent or job.prompt_entries is None:
        return None
    job.prompt_entries_sent = True
    return job.prompt_entries


def _emit(job: Job, item: EngineOutput | BaseException) -> None:
    with contextlib.suppress(RuntimeError):  # the caller's event loop is closed: nobody is waiting
        job.emit(item)

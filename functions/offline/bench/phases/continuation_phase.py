"""Benchmark phase: the mid-stream continuation overhead (docs/reliability.md).

Two real workers of the pool (`fleetchat worker`, started here, dying with the benchmark) behind a gateway process of
the phase's own (fresh SQLite data dir). Each run sends one prompt twice on one session (so both requests go to the
same replica): first uninterrupted (the plain TTFT and the greedy reference answer), then again, killing the serving
worker with SIGKILL after a few content chunks. The gateway continues the answer on the other worker; the client
records when the continuing leg's first content arrived (its first chunk carries the `continuation` announcement), the
gateway's `fleetchat_gateway_continuation_ttft_seconds` and `..._continuations_total` deltas, and whether the stream
was whole. The killed worker is started again before the next run. The streams are read as raw SSE (httpx), so the
`[DONE]` lines and `error` events are counted as sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.progress import Progress

from functions.control.routing import HashRing
from functions.local_stack.worker_key import WORKER_KEY_ENV
from functions.metrics.failover import CONTINUATION_TTFT, CONTINUATIONS
from functions.offline.bench import prompts
from functions.offline.bench.phases.phase_gateway import (
    BenchGateway,
    free_port,
    spawn_gateway,
    unlimited_tenant,
    wait_ready,
)
from functions.offline.bench.phases.priority_phase import admitted_prompts
from functions.offline.bench.prom import sample_value
from functions.offline.bench.results.continuation_results import ContinuationRun, ContinuationStats, summarize
from functions.offline.measure import stats
from gpu_workers.server.parent_death import SUPERVISOR_PID_ENV

WORKER_KV_CACHE_TOKENS = 4096  # two extra SmolLM2 workers beside the stack's: keep their memory small
WORKER_START_TIMEOUT_S = 600.0
REQUEST_TIMEOUT_S = 300.0
OUTCOMES = ("continued", "fallback", "failed")


@dataclass
class ContinuationConfig:
    runs: int = 6
    max_tokens: int = 64
    kill_after_chunks: int = 8


@dataclass
class _Worker:
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, model: str) -> None:
        """Spawn `fleetchat worker` from this (the event loop's) thread: with the supervisor variable set it arms the
        parent-death signal, so it dies with the benchmark even on SIGKILL."""
        command = [
            sys.executable,
            "-m",
            "functions.cli",
            "worker",
            "--pool",
            model,
            "--port",
            str(self.port),
        ]
        command += ["--kv-cache-tokens", str(WORKER_KV_CACHE_TOKENS), "--quiet"]
        env = {**os.environ, SUPERVISOR_PID_ENV: str(os.getpid())}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)

    async def warm_up(self, http: httpx.AsyncClient, model: str) -> None:
        """One tiny request straight to the worker (not through the gateway: no metrics, no breaker): a fresh
        process's first request pays one-off costs that would otherwise land on a measured TTFT."""
        body = {"model": model, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 2}
        # The worker inherits the stack's worker key from this process and answers only requests presenting it.
        key = os.environ.get(WORKER_KEY_ENV)
        headers = {"authorization": f"Bearer {key}"} if key else {}
        (await http.post(f"{self.url}/v1/chat/completions", json=body, headers=headers)).raise_for_status()

    async def wait_healthy(self, http: httpx.AsyncClient) -> float:
        """Seconds until GET /health answers 200 (raises if the process exits or the timeout passes)."""
        began = time.monotonic()
        while True:
            if self.proc is None or self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
                raise RuntimeError(f"worker on port {self.port} exited while starting: {tail}")
            try:
                if (await http.get(f"{self.url}/health", timeout=2.0)).status_code == 200:
                    return time.monotonic() - began
            except httpx.HTTPError:
                pass
            if time.monotonic() - began > WORKER_START_TIMEOUT_S:
                raise TimeoutError(f"worker on port {self.port} not healthy in {WORKER_START_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.5)


@dataclass
class StreamRecord:
    """One stream as the client read it: content arrival times, the announcement, the closing events."""

    started: float
    contents: list[tuple[float, str, bool]] = field(default_factory=list)  # (time, text, chunk was announced)
    announced_at: float | None = None
    ids: set[str] = field(default_factory=set)
    done_events: int = 0
    error_event: bool = False
    last_line_done: bool = False
    finish_reason: str | None = None
    completion_tokens: int | None = None

    @property
    def text(self) -> str:
        return "".join(text for _, text, _ in self.contents)

    @property
    def ttft_s(self) -> float | None:
        return self.contents[0][0] - self.started if self.contents else None

    def legs(self) -> tuple[str, str]:
        """The text before the continuing leg's first content, and from it on (all of it first when never continued)."""
        at = self.announced_at
        first = "".join(text for t, text, _ in self.contents if at is None or t < at)
        return first, self.text[len(first) :]

    def continuation_gap_s(self) -> float | None:
        """Last content chunk before the continuing leg's first content chunk -> that chunk (the client's stall)."""
        if self.announced_at is None:
            return None
        first = next((i for i, (t, _, _) in enumerate(self.contents) if t >= self.announced_at), None)
        if first is None or first == 0:
            return None
        return self.contents[first][0] - self.contents[first - 1][0]

    def observe(self, line: str, now: float) -> bool:
        """Take one SSE line; True when it carried content."""
        self.last_line_done = line == "data: [DONE]"
        if self.last_line_done:
            self.done_events += 1
            return False
        if line.startswith("event: error"):
            self.error_event = True
            return False
        if not line.startswith("data: {"):
            return False  # `id:` lines, blank lines, the error event's data
        chunk = json.loads(line.removeprefix("data: "))
        if "error" in chunk and "choices" not in chunk:
            return False
        self.ids.add(chunk.get("id", ""))
        announced = "continuation" in chunk
        if announced and self.announced_at is None:
            self.announced_at = now
        if isinstance(chunk.get("usage"), dict):
            self.completion_tokens = chunk["usage"].get("completion_tokens")
        content = False
        for choice in chunk.get("choices") or []:
            text = (choice.get("delta") or {}).get("content")
            if text:
                self.contents.append((now, text, announced))
                content = True
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return content


async def read_stream(
    http: httpx.AsyncClient,
    url: str,
    key: str,
    body: dict[str, object],
    session: str,
    kill_after: int | None = None,
    kill: Callable[[], None] | None = None,
) -> tuple[StreamRecord, int | None]:
    """Stream one chat completion; call `kill()` once `kill_after` content chunks arrived. Returns the record and how
    many content chunks had arrived at the kill (None: the stream ended first)."""
    # Answered by a worker every time: a greedy request repeated is otherwise a result-cache hit, replayed by the
    # gateway with no worker to kill (docs/result-cache.md).
    headers = {"Authorization": f"Bearer {key}", "x-session-id": session, "cache-control": "no-cache, no-store"}
    record = StreamRecord(started=time.perf_counter())
    killed_at: int | None = None
    async with http.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as response:
        if response.status_code != 200:
            await response.aread()
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
        async for line in response.aiter_lines():
            if not line:
                continue
            content = record.observe(line, time.perf_counter())
            if content and kill is not None and killed_at is None and len(record.contents) >= (kill_after or 0):
                kill()
                killed_at = len(record.contents)
    return record, killed_at


@dataclass(frozen=True)
class _Counters:
    ttft_sum: float
    ttft_count: float
    outcomes: dict[str, float]


async def _counters(http: httpx.AsyncClient, gateway: str, model: str) -> _Counters:
    text = (await http.get(f"{gateway}/metrics", timeout=10.0)).text
    return _Counters(
        ttft_sum=sample_value(text, f"{CONTINUATION_TTFT}_sum", {"pool": model}) or 0.0,
        ttft_count=sample_value(text, f"{CONTINUATION_TTFT}_count", {"pool": model}) or 0.0,
        outcomes={o: sample_value(text, CONTINUATIONS, {"pool": model, "outcome": o}) or 0.0 for o in OUTCOMES},
    )


def judge_run(
    run: int,
    plain: StreamRecord,
    cut: StreamRecord,
    killed_at: int | None,
    before: _Counters,
    after: _Counters,
    max_tokens: int,
) -> ContinuationRun:
    """One run's record from the two streams and the gateway's counters around the interrupted one."""
    grew = [o for o in OUTCOMES if after.outcomes[o] > before.outcomes[o]]
    outcome = grew[0] if grew else ("not killed" if killed_at is None else "no continuation")
    count = after.ttft_count - before.ttft_count
    server_ms = (after.ttft_sum - before.ttft_sum) / count * 1000 if count > 0 else None
    first_leg, second_leg = cut.legs()
    tokens = cut.completion_tokens
    whole = (
        killed_at is not None
        and len(cut.ids) == 1
        and cut.done_events == 1
        and cut.last_line_done
        and not cut.error_event
        and cut.finish_reason is not None
        and bool(second_leg)
        # A second leg that starts the answer over (the request re-sent without the partial answer) repeats it.
        and not second_leg.startswith(first_leg)
        and tokens is not None
        and killed_at <= tokens <= max_tokens
    )
    reference = plain.text if plain.finish_reason is not None and not plain.error_event else None
    return ContinuationRun(
        run=run,
        outcome=outcome,
        chunks_before_kill=killed_at or 0,
        plain_ttft_ms=stats.to_ms(plain.ttft_s),
        gap_ms=stats.to_ms(cut.continuation_gap_s()),
        server_ttft_ms=server_ms,
        done_events=cut.done_events,
        error_event=cut.error_event,
        ids=len(cut.ids),
        whole=whole,
        matches_reference=None if reference is None else cut.text == reference,
        completion_tokens=tokens,
    )


async def _one_run(
    i: int,
    http: httpx.AsyncClient,
    gateway: str,
    key: str,
    model: str,
    workers: list[_Worker],
    cfg: ContinuationConfig,
    prompt_index: int,
    tag: str,
) -> ContinuationRun:
    session = f"bench-continuation-{tag}-{i}"
    owner = next(HashRing([w.url for w in workers]).candidates(session))
    victim = next(w for w in workers if w.url == owner)  # the gateway's sticky choice for this session
    body = {
        "model": model,
        "messages": prompts.generation_messages(prompt_index, f"cont-{tag}-{i}"),
        "max_tokens": cfg.max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    plain, _ = await read_stream(http, gateway, key, body, session)
    before = await _counters(http, gateway, model)
    cut, killed_at = await read_stream(http, gateway, key, body, session, cfg.kill_after_chunks, victim.kill)
    after = await _counters(http, gateway, model)
    return judge_run(i, plain, cut, killed_at, before, after, cfg.max_tokens)


async def _drive(
    model: str, cfg: ContinuationConfig, tmp: Path, progress: Progress
) -> tuple[list[ContinuationRun], list[str]]:
    notes: list[str] = []
    runs: list[ContinuationRun] = []
    data_dir = tmp / "data"
    data_dir.mkdir()
    workers = [_Worker(free_port(), tmp / f"worker-{i}.log") for i in range(2)]
    gateway: BenchGateway | None = None
    start = progress.add_task("continuation: start 2 workers + a gateway", total=3)
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=10.0)) as http:
            for worker in workers:
                worker.start(model)
            for worker in workers:
                await worker.wait_healthy(http)
                await worker.warm_up(http, model)
                progress.advance(start)
            key = unlimited_tenant(data_dir, model, "bench-continuation")
            gateway = spawn_gateway(data_dir, model, [w.url for w in workers])
            await wait_ready(http, gateway)
            progress.advance(start)
            usable = await asyncio.to_thread(admitted_prompts, cfg.runs)
            tag = secrets.token_hex(3)
            task = progress.add_task(f"continuation: kill -9 mid-stream x{cfg.runs}", total=cfg.runs)
            for i in range(cfg.runs):
                try:
                    run = await _one_run(i, http, gateway.url, key, model, workers, cfg, usable[i % len(usable)], tag)
                except Exception as exc:  # one failed run is a row in the report, not a lost phase
                    run = ContinuationRun(
                        run=i, outcome="error", chunks_before_kill=0, plain_ttft_ms=None, gap_ms=None,
                        server_ttft_ms=None, done_events=0, error_event=False, ids=0, whole=False,
                        matches_reference=None, completion_tokens=None, error=f"{type(exc).__name__}: {exc}"[:300],
                    )  # fmt: skip
                runs.append(run)
                dead = [w for w in workers if w.proc is not None and w.proc.poll() is not None]
                if dead and i + 1 < cfg.runs:
                    for worker in dead:  # started again, on the same port: the gateway routes to it as before
                        worker.start(model)
                        run.restart_s = round(await worker.wait_healthy(http), 1)
                        await worker.warm_up(http, model)
                progress.advance(task)
    finally:
        if gateway is not None:
            gateway.stop()
        for worker in workers:
            worker.stop()
    return runs, notes


async def continuation_phase(
    model: str, cfg: ContinuationConfig, progress: Progress
) -> tuple[ContinuationStats | None, list[str]]:
    """The phase, or (None, a note) where it cannot run."""
    if cfg.kill_after_chunks >= cfg.max_tokens:
        return None, [f"max_tokens {cfg.max_tokens} leaves no second leg: the continuation phase was skipped."]
    with tempfile.TemporaryDirectory(prefix="fleetchat-bench-continuation-") as tmp:
        runs, notes = await _drive(model, cfg, Path(tmp), progress)
    return summarize(model, cfg.max_tokens, cfg.kill_after_chunks, runs, notes), []

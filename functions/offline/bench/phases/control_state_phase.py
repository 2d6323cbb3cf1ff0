"""Benchmark phase: what the shared control state costs a streamed answer, on the embedded engine (SQLite, a temp
file) and on Redis (Debian's redis-server on loopback, when installed). Each simulated answer goes through the real
StreamWriter as a gateway's does (open with its takeover spec, every event written before a client may see it, the
end), paced like a token stream; timed: the first event's wait (what the shared state adds to a request's time to
first token) and every later event's; counted: the engine's requests per answer and per 1,000 tokens."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from rich.progress import Progress

from functions.chat.streams.shared_log import SharedStreamLog
from functions.control.fleet_sync import FleetMetrics, FleetSync
from functions.offline.bench.results.control_state_results import ControlStateStats
from functions.offline.measure import stats
from functions.offline.measure.redis_process import redis_process
from shared.settings import ControlStateSettings
from shared.storage.control_state import ControlState
from shared.storage.redis_control_state import RedisControlState
from shared.storage.sqlite.control_state import SQLiteControlState

# A content chunk as a gateway relays it (about 150 bytes) and a takeover spec of a short conversation (about 2 KB).
_CHUNK = (
    b'data: {"id":"chatcmpl-0123456789abcdef0123456789abcdef","object":"chat.completion.chunk","created":1765000000,'
    b'"model":"mini","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}\n\n'
)
_SPEC: dict[str, Any] = {"body": {"messages": [{"role": "user", "content": "x" * 1800}]}, "pool": "mini"}


class _Counted:
    """The engine with every call counted (a call is one request to the engine)."""

    def __init__(self, inner: ControlState) -> None:
        self.inner, self.calls = inner, 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return await method(*args, **kwargs)

        return counted


async def measure_engine(
    name: str, state: ControlState, answers: int, tokens: int, interval_s: float, progress: Progress
) -> ControlStateStats:
    counted = _Counted(state)
    settings = ControlStateSettings()
    fleet = FleetSync(counted, settings, FleetMetrics(CollectorRegistry()))  # type: ignore[arg-type]
    shared = SharedStreamLog(counted, fleet, settings, max_bytes=4 << 20, ttl_s=120)  # type: ignore[arg-type]
    task = progress.add_task(f"shared stream state: {name}", total=answers)
    firsts: list[float] = []
    laters: list[float] = []
    for n in range(answers):
        generated_at: dict[int, float] = {}
        visible = asyncio.Event()

        def written(seq: int, generated_at: dict[int, float] = generated_at, visible: asyncio.Event = visible) -> None:
            now = time.perf_counter()
            for waiting in [s for s in generated_at if s <= seq]:
                (firsts if waiting == 1 else laters).append(now - generated_at.pop(waiting))
            visible.set()

        writer = shared.writer(f"ten_bench_{n % 8}", {"x-request-id": f"req_{n}"}, [f"req_{n}"], takeover=_SPEC,
                               on_written=written)  # fmt: skip
        for seq in range(1, tokens + 1):
            generated_at[seq] = time.perf_counter()
            writer.add(seq, _CHUNK)
            await asyncio.sleep(interval_s)
        await writer.finish()
        progress.advance(task)
    calls = counted.calls
    return ControlStateStats(
        engine=name,
        answers=answers,
        tokens_per_answer=tokens,
        token_interval_ms=interval_s * 1000,
        first_event_p50_ms=stats.to_ms(stats.percentile(firsts, 50)),
        first_event_p99_ms=stats.to_ms(stats.percentile(firsts, 99)),
        event_p50_ms=stats.to_ms(stats.percentile(laters, 50)),
        event_p99_ms=stats.to_ms(stats.percentile(laters, 99)),
        requests_per_answer=calls / answers,
        requests_per_1k_tokens=calls / (answers * tokens) * 1000,
    )


@asynccontextmanager
async def _redis(directory: Path) -> AsyncIterator[ControlState | None]:
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    with redis_process(binary, directory) as url:
        state = RedisControlState(url)
        try:
            yield state
        finally:
            await state.aclose()


async def control_state_phase(
    answers: int, tokens: int, interval_s: float, progress: Progress
) -> tuple[list[ControlStateStats], list[str]]:
    results, notes = [], []
    with tempfile.TemporaryDirectory(prefix="fleetchat-bench-control-") as directory:
        sqlite = SQLiteControlState(Path(directory) / "control.db")
        try:
            results.append(await measure_engine("sqlite", sqlite, answers, tokens, interval_s, progress))
        finally:
            await sqlite.aclose()
        async with _redis(Path(directory)) as redis:
            if redis is None:
                notes.append("control state on Redis not measured: redis-server is not installed")
            else:
                results.append(await measure_engine("redis", redis, answers, tokens, interval_s, progress))
    return results, notes

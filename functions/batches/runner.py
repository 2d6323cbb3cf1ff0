"""The batch runner: takes an active batch under a lease, checks its input, runs the lines that have no result yet,
and finalizes it into output and error files (completed, expired or cancelled).

Crash safety: a line's result is written once, with the batch's counts, in one atomic write (BatchStore.record_line)
after its answer; its request id is fixed by the batch and the line, so the ledger bills it once however often it
runs. A runner killed at any point leaves the batch active with its lease; when the lease lapses, the next look of any
runner (another gateway, the restarted one, the deployed scheduled job) takes it over and runs exactly the lines
without a result. A line killed mid-answer is run again; its first run's tokens were billed under the same request id
(aborted), so the rerun is not billed twice. Output files get ids fixed by the batch, so a finalize run again after a
crash keeps the files already written.

Cancel and expiry: the lease is renewed every third of its length, and each renewal reads the batch again; a batch
the API moved to `cancelling` starts no more lines and is finalized `cancelled` with the results so far; a batch past
its 24 h window starts no more lines, and its remaining lines go to the error file as `batch_expired`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta

from anyio import to_thread
from prometheus_client import CollectorRegistry, Counter
from tenacity import AsyncRetrying, retry_if_result, stop_after_attempt, wait_random_exponential

from functions.accounts.auth import Caller
from functions.batches.input_file import read_input
from functions.batches.lines import LineAnswer, LineRunner
from functions.control.pool_admission import CapacityExceededError
from functions.files.files_service import FilesService
from shared.errors import QuotaExceededError, RateLimitError
from shared.settings import BatchSettings
from shared.storage.accounts import TenantStore
from shared.storage.batches import BatchStore, BatchUpdate, LineResult, StoredBatch
from shared.storage.timestamps import utc_now
from shared.wire.batches_api import BatchError, BatchInputLine, BatchOutputLine, LineError, LineResponse

log = logging.getLogger("fleetchat.batches")

MAX_RATE_WAIT_S = 60.0  # a 429's retry-after is honoured up to this (the gateway never asks for more)
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."


class BatchMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.lines = Counter(
            "fleetchat_gateway_batch_lines", "Batch lines finished, by outcome (completed, failed, expired).",
            ["outcome"], registry=registry,
        )  # fmt: skip
        self.batches = Counter(
            "fleetchat_gateway_batches", "Batches that reached a final status, by status.", ["status"],
            registry=registry,
        )  # fmt: skip
        self.leases = Counter(
            "fleetchat_gateway_batch_leases", "Batch lease attempts, by outcome (taken, held_elsewhere, lost).",
            ["outcome"], registry=registry,
        )  # fmt: skip


def line_request_id(batch_id: str, line: int, attempt: int = 0) -> str:
    """The request id a line is billed under: the same on every run of that line (a retry after a 5xx, whose first
    attempt may have billed what it generated, takes the next)."""
    base = f"batch_req_{batch_id.removeprefix('batch_')}_{line}"
    return base if attempt == 0 else f"{base}.{attempt}"


def output_file_id(batch_id: str, kind: str) -> str:
    return "file-" + hashlib.sha256(f"{batch_id}:{kind}".encode()).hexdigest()[:24]


STATUS_LOOK_S = 1.0  # while lines run, the batch's status is read again at most this often (a cancel elsewhere)


@dataclass
class _Lease:
    stop: str | None = None  # why no more lines start: "cancelling", "expired" or "lost"
    looked_at: float = 0.0  # when the status was last read (monotonic)


class BatchRunner:
    def __init__(
        self, store: BatchStore, files: FilesService, tenants: TenantStore, lines: LineRunner,
        settings: BatchSettings, metrics: BatchMetrics, *, on_line: Callable[[LineResult], None] | None = None,
    ) -> None:  # fmt: skip
        self.store = store
        self.files = files
        self.tenants = tenants
        self.lines = lines
        self.settings = settings
        self.metrics = metrics
        self.on_line = on_line  # each line kept: progress, for logs and tests
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._leases: dict[tuple[str, str], _Lease] = {}
        self._watcher: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    # -- looking for work ------------------------------------------------------------------------------------------
    def nudge(self) -> None:
        """A batch was created or cancelled: look now rather than at the next poll."""
        self._wake.set()

    def cancelled(self, tenant_id: str, batch_id: str) -> None:
        """The API moved a batch to `cancelling`: if it runs here, it starts no more lines from now on (elsewhere,
        its runner reads the status within `STATUS_LOOK_S`)."""
        lease = self._leases.get((tenant_id, batch_id))
        if lease is not None:
            lease.stop = lease.stop or "cancelling"
        self.nudge()

    def start_watching(self) -> None:
        """Look for work in the background until `aclose` (a gateway's runner)."""
        self._watcher = asyncio.create_task(self.watch(), name="batch runner")

    async def watch(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:  # a store hiccup: the next look tries again
                log.exception("looking for batches failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.poll_s)
            self._wake.clear()

    async def run_once(self) -> int:
        """Start every active batch this runner can take (and is not running already); how many were started."""
        active = await to_thread.run_sync(lambda: list(self.store.active()))
        started = 0
        for batch in active:
            key = (batch.tenant_id, batch.id)
            if key in self._tasks:
                continue
            if not await self._claim(batch):
                continue
            task = asyncio.create_task(self._run(batch), name=f"batch {batch.id}")
            self._tasks[key] = task
            task.add_done_callback(lambda _, key=key: self._tasks.pop(key, None))  # type: ignore[misc]
            started += 1
        return started

    async def drain(self, deadline_s: float) -> int:
        """Run batches until none is active, or those left are held by other runners for longer than a lease (they
        are alive: a dead holder's lease would have lapsed), or `deadline_s` (monotonic) passes; batches started."""
        ran = 0
        loop = asyncio.get_running_loop()
        idle_since: float | None = None
        while loop.time() < deadline_s:
            ran += await self.run_once()
            if self._tasks:
                idle_since = None
                await asyncio.wait(list(self._tasks.values()), timeout=max(deadline_s - loop.time(), 0))
                continue
            active = await to_thread.run_sync(lambda: list(self.store.active()))
            idle_since = loop.time() if idle_since is None else idle_since
            if not active or loop.time() - idle_since > self.settings.lease_s + self.settings.poll_s:
                break
            await asyncio.sleep(min(self.settings.poll_s, max(deadline_s - loop.time(), 0)))
        return ran

    async def wait_idle(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def aclose(self) -> None:
        """Stop looking for work and running batches: they stay active and are taken over once the lease lapses (or
        at the next start)."""
        tasks = [*self._tasks.values(), *([self._watcher] if self._watcher is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _claim(self, batch: StoredBatch) -> bool:
        now = utc_now()
        until = now + timedelta(seconds=self.settings.lease_s)
        taken = await to_thread.run_sync(self.store.claim, batch.tenant_id, batch.id, self.owner, until, now)
        self.metrics.leases.labels("taken" if taken else "held_elsewhere").inc()
        return taken

    # -- one batch -------------------------------------------------------------------------------------------------
    async def _run(self, batch: StoredBatch) -> None:
        key = (batch.tenant_id, batch.id)
        lease = self._leases[key] = _Lease(looked_at=asyncio.get_running_loop().time())
        try:
            async with self._renewing(batch, lease):
                await self._advance(batch, lease)
        except Exception:
            log.exception("batch %s stopped; it is taken up again at a later look", batch.id)
        finally:
            self._leases.pop(key, None)

    async def _look(self, batch: StoredBatch, lease: _Lease) -> None:
        """Before a line starts: read the batch's status again if the last look is older than `STATUS_LOOK_S`."""
        now = asyncio.get_running_loop().time()
        if utc_now() >= batch.expires_at:
            lease.stop = lease.stop or "expired"
        if lease.stop is not None or now - lease.looked_at < STATUS_LOOK_S:
            return
        lease.looked_at = now
        current = await to_thread.run_sync(self.store.get, batch.tenant_id, batch.id)
        if current is None or current.status == "cancelling":
            lease.stop = lease.stop or "cancelling"

    @contextlib.asynccontextmanager
    async def _renewing(self, batch: StoredBatch, lease: _Lease) -> AsyncIterator[None]:
        async def renew() -> None:
            while True:
                await asyncio.sleep(self.settings.lease_s / 3)
                if not await self._claim(batch):
                    self.metrics.leases.labels("lost").inc()
                    lease.stop = "lost"
                    return
                current = await to_thread.run_sync(self.store.get, batch.tenant_id, batch.id)
                if current is not None and current.status == "cancelling":
                    lease.stop = lease.stop or "cancelling"
                if utc_now() >= batch.expires_at:
                    lease.stop = lease.stop or "expired"

        renewer = asyncio.create_task(renew(), name=f"batch lease {batch.id}")
        try:
            yield
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    async def _advance(self, batch: StoredBatch, lease: _Lease) -> None:
        lines: list[BatchInputLine] | None = None  # the input, read once per run (validated lines go on to run)
        if batch.status == "validating":
            batch, lines = await self._validate(batch)
        if batch.status == "in_progress":
            batch = await self._run_lines(batch, lease, lines if lines is not None else await self._input(batch))
        if lease.stop == "lost":
            return
        if batch.status == "cancelling":
            await self._finalize(batch, "cancelled")
        elif batch.status == "finalizing":
            await self._finalize(batch, "completed")

    async def _input(self, batch: StoredBatch) -> list[BatchInputLine] | None:
        body = await to_thread.run_sync(self.files.backends.blobs.read, batch.tenant_id, batch.input_file_id)
        if body is None:
            await self._fail(batch, "missing_file", f"The input file {batch.input_file_id} no longer exists.")
            return None
        found = read_input(body, batch.endpoint, max_lines=self.settings.max_lines)
        if found.errors:
            await self._advance_to(batch, BatchUpdate(status="failed", failed_at=utc_now(), errors=found.errors))
            return None
        return found.lines

    async def _validate(self, batch: StoredBatch) -> tuple[StoredBatch, list[BatchInputLine] | None]:
        lines = await self._input(batch)
        if lines is None:
            return batch.model_copy(update={"status": "failed"}), None
        model = next((line.body["model"] for line in lines if isinstance(line.body.get("model"), str)), None)
        update = BatchUpdate(status="in_progress", in_progress_at=utc_now(), total=len(lines), model=model)
        moved = await self._advance_to(batch, update, from_statuses=frozenset({"validating"}))
        return moved or await self._current(batch), lines

    async def _run_lines(self, batch: StoredBatch, lease: _Lease, lines: list[BatchInputLine] | None) -> StoredBatch:
        if lines is None:  # the input failed its read (the batch is failed by now)
            return await self._current(batch)
        caller = await to_thread.run_sync(self._caller_of, batch)
        if caller is None:
            await self._fail(batch, "invalid_api_key", "The API key that created this batch was revoked or deleted.")
            return await self._current(batch)
        done = await to_thread.run_sync(self.store.done_lines, batch.tenant_id, batch.id)
        todo = [(number, line) for number, line in enumerate(lines) if number not in done]
        if todo:
            log.info("batch %s: %d of %d lines to run", batch.id, len(todo), len(lines))
        slots = asyncio.Semaphore(self.settings.concurrent_lines)
        running: set[asyncio.Task[None]] = set()
        for number, line in todo:
            await slots.acquire()
            await self._look(batch, lease)
            if lease.stop is not None:
                slots.release()
                break
            task = asyncio.create_task(self._line(caller, batch, number, line, lease))
            running.add(task)
            task.add_done_callback(lambda finished: (running.discard(finished), slots.release()))
        if running:
            await asyncio.gather(*running)
        if lease.stop == "lost":
            return batch
        if lease.stop == "expired":
            await self._expire(batch, lines)
            return await self._current(batch)
        if lease.stop == "cancelling":
            return await self._current(batch)
        moved = await self._advance_to(
            batch, BatchUpdate(status="finalizing", finalizing_at=utc_now()), from_statuses=frozenset({"in_progress"})
        )
        return moved or await self._current(batch)

    async def _line(self, caller: Caller, batch: StoredBatch, number: int, line: BatchInputLine, lease: _Lease) -> None:
        answer, request_id = await self._answer(caller, batch, number, line, lease)
        if answer is None:
            return  # stopped while waiting out a rate limit: the line stays without a result
        prompt, cached, completion = answer.usage
        result = LineResult(
            tenant_id=batch.tenant_id, batch_id=batch.id, line=number, custom_id=line.custom_id,
            request_id=request_id, status_code=answer.status_code, body=answer.body, input_tokens=prompt,
            cached_tokens=cached, output_tokens=completion,
        )  # fmt: skip
        if await to_thread.run_sync(self.store.record_line, result):
            self.metrics.lines.labels("completed" if result.ok else "failed").inc()
            if self.on_line is not None:
                self.on_line(result)

    async def _answer(
        self, caller: Caller, batch: StoredBatch, number: int, line: BatchInputLine, lease: _Lease
    ) -> tuple[LineAnswer | None, str]:
        """The line's answer: a 429 (or a pool with no place in time: batch lines wait behind interactive traffic)
        waits its retry-after and tries again (uncounted; a hard quota is an answer), a 5xx is tried again up to
        `line_attempts` in all, each under the next request id."""
        attempt = 0
        request_id = line_request_id(batch.id, number)

        async def once() -> LineAnswer | None:
            nonlocal attempt, request_id
            request_id = line_request_id(batch.id, number, attempt)
            attempt += 1
            while True:
                answer = await self.lines.run(caller, batch.endpoint, line.body, request_id)
                error = answer.error
                busy = isinstance(error, RateLimitError | CapacityExceededError)
                if not busy or isinstance(error, QuotaExceededError):
                    return answer
                if lease.stop is not None:
                    return None
                await asyncio.sleep(min(float(error.headers.get("retry-after", 1) or 1), MAX_RATE_WAIT_S))

        retrying = AsyncRetrying(
            retry=retry_if_result(lambda answer: answer is not None and answer.status_code >= 500),
            stop=stop_after_attempt(self.settings.line_attempts),
            wait=wait_random_exponential(multiplier=0.5, max=30),
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        )
        answer = await retrying(once)
        return answer, request_id

    async def _expire(self, batch: StoredBatch, lines: list[BatchInputLine]) -> None:
        done = await to_thread.run_sync(self.store.done_lines, batch.tenant_id, batch.id)
        for number, line in enumerate(lines):
            if number in done:
                continue
            result = LineResult(
                tenant_id=batch.tenant_id, batch_id=batch.id, line=number, custom_id=line.custom_id,
                request_id=line_request_id(batch.id, number), error_code="batch_expired", error_message=EXPIRED_MESSAGE,
            )  # fmt: skip
            if await to_thread.run_sync(self.store.record_line, result):
                self.metrics.lines.labels("expired").inc()
        await self._finalize(batch.model_copy(update={"status": "in_progress"}), "expired")

    async def _finalize(self, batch: StoredBatch, final: str) -> None:
        """Write the output and error files (ids fixed by the batch: a rerun keeps what was written), then the final
        status with its time."""
        counted = await self._current(batch)  # the counts every kept line added to
        files: dict[str, str | None] = {"output_file_id": None, "error_file_id": None}
        for field, kind, ok, count in (
            ("output_file_id", "output", True, counted.completed),
            ("error_file_id", "error", False, counted.failed),
        ):
            if count:
                file_id = output_file_id(batch.id, kind)
                # Streamed from the store into the file (a batch's results can be large), with the files' own expiry.
                chosen = (r for r in self.store.lines(batch.tenant_id, batch.id) if r.ok == ok)
                keep = functools.partial(self.files.keep_output, expires_after_s=batch.output_expires_after_s)
                await to_thread.run_sync(keep, batch.tenant_id, file_id, f"{batch.id}_{kind}.jsonl", _jsonl(chosen))
                files[field] = file_id
        now = utc_now()
        update = BatchUpdate(status=final, **{f"{final}_at": now}, **files)  # type: ignore[arg-type]
        if await self._advance_to(batch, update, from_statuses=frozenset({batch.status})):
            self.metrics.batches.labels(final).inc()
            log.info("batch %s %s: %d answered, %d failed", batch.id, final, counted.completed, counted.failed)

    async def _fail(self, batch: StoredBatch, code: str, message: str) -> None:
        update = BatchUpdate(status="failed", failed_at=utc_now(), errors=[BatchError(code=code, message=message)])
        if await self._advance_to(batch, update):
            self.metrics.batches.labels("failed").inc()

    async def _advance_to(
        self, batch: StoredBatch, update: BatchUpdate, *, from_statuses: frozenset[str] | None = None
    ) -> StoredBatch | None:
        statuses = from_statuses if from_statuses is not None else frozenset({batch.status})
        return await to_thread.run_sync(
            lambda: self.store.advance(batch.tenant_id, batch.id, update, from_statuses=statuses, owner=self.owner)
        )

    async def _current(self, batch: StoredBatch) -> StoredBatch:
        current = await to_thread.run_sync(self.store.get, batch.tenant_id, batch.id)
        return current if current is not None else batch.model_copy(update={"status": "failed"})

    def _caller_of(self, batch: StoredBatch) -> Caller | None:
        tenant = self.tenants.get_tenant(batch.tenant_id)
        if tenant is None:
            return None
        key = next((k for k in self.tenants.list_keys(tenant.id) if k.id == batch.key_id), None)
        return None if key is None or key.revoked_at is not None else Caller(tenant, key)


def _jsonl(results: Iterable[LineResult]) -> Iterator[bytes]:
    for result in results:
        line = BatchOutputLine(
            id=line_request_id(result.batch_id, result.line),
            custom_id=result.custom_id,
            response=None
            if result.status_code is None
            else LineResponse(status_code=result.status_code, request_id=result.request_id, body=result.body or {}),
            error=None
            if result.error_code is None
            else LineError(code=result.error_code, message=result.error_message or ""),
        )
        yield line.model_dump_json().encode() + b"\n"

"""Ingestion of a file into a vector store, in the background: extract, chunk by structure, embed in batches, index
the file's chunks in one atomic write, then mark it `completed` (or `failed` with a `last_error`, that file only).

Crash safety: the index write is all-or-nothing and the status is written after it, so a gateway killed at any point
leaves the file `in_progress` with either none of its chunks indexed or all of them; `resume()` (at start-up, then
every lease period) runs every `in_progress` file again, and the re-run replaces whatever the killed one had written.

Replicas: a gateway ingests a file only while it holds the file's lease (`FileStore.claim`, an atomic conditional
write in both stores), renewed every third of the lease while it works and checked once more right before the index
write. Two replicas resuming the same file: one takes the lease, the other leaves the file alone; a replica that dies
holds it until the lease lapses, then the next look of any replica takes it over. A replica that lost its lease
(stalled past it) stops without writing. Progress is the vector store's `file_counts` plus the
`fleetchat_gateway_ingestion_*` metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Callable
from datetime import timedelta

from anyio import to_thread
from prometheus_client import CollectorRegistry, Counter

from functions.accounts.auth import Caller
from functions.files.backends import FileBackends
from functions.files.chunking import Chunk, chunk_text
from functions.files.embedder import BATCH, Embedder
from functions.files.extract import ExtractionError, extract_text
from shared.errors import FleetchatError
from shared.storage.accounts import TenantStore
from shared.storage.files import Attachment
from shared.storage.timestamps import utc_now
from shared.storage.vector_index import IndexedChunk

log = logging.getLogger(__name__)
CONCURRENT_FILES = 2  # files ingested at once per gateway (each embeds batch after batch)


class IngestionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.files = Counter(
            "fleetchat_gateway_ingestion_files", "Files ingested into vector stores, by outcome.", ["outcome"],
            registry=registry,
        )  # fmt: skip
        self.chunks = Counter("fleetchat_gateway_ingestion_chunks", "Chunks embedded and indexed.", registry=registry)
        self.leases = Counter(
            "fleetchat_gateway_ingestion_leases", "Ingestion lease attempts, by outcome (taken, held_elsewhere, lost).",
            ["outcome"], registry=registry,
        )  # fmt: skip


class LeaseLost(Exception):
    """Another gateway holds the file's lease now (this one stalled past it): stop without writing anything."""


class Ingestor:
    def __init__(
        self, backends: FileBackends, tenants: TenantStore, embedder: Embedder, metrics: IngestionMetrics,
        *, lease_s: float, on_batch: Callable[[Attachment, int, int], None] | None = None,
    ) -> None:  # fmt: skip
        self.lease_s = lease_s
        # Who holds a lease: this process, distinguishable from a restart of it on the same host.
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.backends = backends
        self.tenants = tenants
        self.embedder = embedder
        self.metrics = metrics
        self.on_batch = on_batch  # (attachment, chunks embedded, chunks in all): progress, for logs and tests
        self._tasks: dict[tuple[str, str, str], asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(CONCURRENT_FILES)

    def start(self, attachment: Attachment, caller: Caller) -> None:
        key = (attachment.tenant_id, attachment.vector_store_id, attachment.file_id)
        if key in self._tasks:
            return
        task = asyncio.create_task(self._run(attachment, caller), name=f"ingest {attachment.file_id}")
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._tasks.pop(key, None))

    async def watch(self) -> None:
        """Every lease period, `resume()` again: files whose replica died are taken over once its lease lapsed."""
        while True:
            await asyncio.sleep(self.lease_s)
            try:
                await self.resume()
            except Exception:  # a store hiccup: the next look tries again
                log.exception("resuming ingestion failed")

    async def resume(self) -> int:
        """Start every `in_progress` attachment again (after a restart or a crash, or held by a replica that died:
        only the one holding its lease runs it); how many were started here."""
        pending = await to_thread.run_sync(lambda: list(self.backends.files.pending()))
        started = 0
        for attachment in pending:
            caller = await to_thread.run_sync(self._caller_of, attachment)
            if caller is None:
                await self._finish(attachment, [], "server_error", "The tenant or its key no longer exists.")
                continue
            self.start(attachment, caller)
            started += 1
        return started

    def _caller_of(self, attachment: Attachment) -> Caller | None:
        tenant = self.tenants.get_tenant(attachment.tenant_id)
        if tenant is None:
            return None
        keys = self.tenants.list_keys(tenant.id)
        key = next((k for k in keys if k.id == attachment.key_id), keys[0] if keys else None)
        return None if key is None else Caller(tenant, key)

    async def aclose(self) -> None:
        """Cancel ingestion in flight: it stays `in_progress` and resumes at the next start."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def wait_idle(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def _claim(self, attachment: Attachment) -> bool:
        a, now = attachment, utc_now()
        until = now + timedelta(seconds=self.lease_s)
        claim = self.backends.files.claim
        return await to_thread.run_sync(claim, a.tenant_id, a.vector_store_id, a.file_id, self.owner, until, now)

    async def _heartbeat(self, attachment: Attachment, work: asyncio.Task[None]) -> None:
        """Renew the lease every third of it; cancel `work` when it was lost."""
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                held = await self._claim(attachment)
            except Exception:  # the store did not answer: the lease may still be ours; the final check decides
                log.warning("renewing the ingestion lease of %s failed", attachment.file_id)
                continue
            if not held:
                self.metrics.leases.labels("lost").inc()
                work.cancel()
                return

    async def _run(self, attachment: Attachment, caller: Caller) -> None:
        async with self._slots:
            try:
                claimed = await self._claim(attachment)
            except Exception:  # the store did not answer: the file stays in_progress; the next look tries again
                log.warning("could not claim the ingestion of %s; trying again later", attachment.file_id)
                return
            if not claimed:  # another replica ingests it (or it is finished or gone)
                self.metrics.leases.labels("held_elsewhere").inc()
                return
            self.metrics.leases.labels("taken").inc()
            work = asyncio.create_task(self._ingest(attachment, caller))
            heartbeat = asyncio.create_task(self._heartbeat(attachment, work))
            try:
                await work
            except asyncio.CancelledError:
                if heartbeat.done() and not heartbeat.cancelled():  # the lease was lost: leave the file to its holder
                    log.warning("ingestion of %s stopped: another gateway took its lease", attachment.file_id)
                    return
                work.cancel()
                raise
            except LeaseLost:
                log.warning("ingestion of %s stopped: another gateway took its lease", attachment.file_id)
            except ExtractionError as exc:
                await self._finish(attachment, [], exc.code, exc.message)
            except FleetchatError as exc:
                await self._finish(attachment, [], "server_error", f"Embedding failed: {exc.message}")
            except Exception as exc:
                log.exception("ingestion of %s failed", attachment.file_id)
                await self._finish(attachment, [], "server_error", f"Ingestion failed ({type(exc).__name__}).")
            finally:
                heartbeat.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeat

    async def _ingest(self, attachment: Attachment, caller: Caller) -> None:
        b = self.backends
        store = await to_thread.run_sync(b.files.get_vector_store, attachment.tenant_id, attachment.vector_store_id)
        record = await to_thread.run_sync(b.files.get_file, attachment.tenant_id, attachment.file_id)
        body = None if record is None else await to_thread.run_sync(b.blobs.read, record.tenant_id, record.id)
        if store is None or record is None or body is None:
            raise ExtractionError("invalid_file", "The file no longer exists.")
        text = await to_thread.run_sync(extract_text, record.kind, body)
        model = store.embedding_model
        spans = self.embedder.token_spans(model)
        # Room for the heading line the chunk is embedded with (see embedded_text) under the model's input limit.
        budget = self.embedder.max_input_tokens(model) - 56
        chunks = await to_thread.run_sync(lambda: chunk_text(text, spans, max_tokens=budget))
        vectors = []
        for first in range(0, len(chunks), BATCH):
            batch = chunks[first : first + BATCH]
            texts = [embedded_text(chunk, spans, budget + 54) for chunk in batch]
            vectors.extend(await self.embedder.embed_patiently(caller, model, texts))
            self.metrics.chunks.inc(len(batch))
            if self.on_batch is not None:
                self.on_batch(attachment, first + len(batch), len(chunks))
        indexed = [
            IndexedChunk(f"{record.id}-{c.seq:05d}", record.id, c.seq, c.text, c.start, c.end, c.heading, v)
            for c, v in zip(chunks, vectors, strict=True)
        ]
        if not await self._claim(attachment):  # last look before writing: only the lease holder writes
            self.metrics.leases.labels("lost").inc()
            raise LeaseLost()
        await to_thread.run_sync(b.index.replace_file, record.tenant_id, store.id, record.id, indexed)
        await self._finish(attachment, indexed)

    async def _finish(
        self, attachment: Attachment, indexed: list[IndexedChunk], code: str | None = None, message: str | None = None
    ) -> None:
        done = attachment.model_copy(
            update={
                "status": "failed" if code else "completed",
                "error_code": code,
                "error_message": message,
                "chunks": len(indexed),
                "usage_bytes": sum(len(c.text.encode()) + 4 * len(c.vector) for c in indexed),
            }
        )
        b = self.backends
        kept = await to_thread.run_sync(b.files.finish, done)
        if not kept and indexed:  # detached (or its file deleted) while it ran: take back what was indexed
            await to_thread.run_sync(b.index.remove_file, done.tenant_id, done.vector_store_id, done.file_id)
        self.metrics.files.labels("failed" if code else "completed").inc()


def embedded_text(chunk: Chunk, spans: Callable[[str], list[tuple[int, int]]], limit: int) -> str:
    """The chunk with its heading path in front (retrieval by section titles), when both fit the model's input."""
    if chunk.heading and not chunk.text.lstrip().startswith("#"):
        with_heading = f"{chunk.heading}\n{chunk.text}"
        if len(spans(with_heading)) <= limit:
            return with_heading
    tokens = spans(chunk.text)
    # A heading too long to share a chunk: embed what fits (the stored chunk stays whole, its offsets exact).
    return chunk.text if len(tokens) <= limit else chunk.text[: tokens[limit - 1][1]]

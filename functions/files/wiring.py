"""Files and vector stores in the gateway: the stores opened at start-up, the services on `app.state`, ingestion left
`in_progress` by a previous process resumed, and the upload route's own body-size bound.

`app.state`: `files_service` (FilesService), `vector_stores` (VectorStoresService), `vector_search`
(VectorStoreSearch, the call retrieval in chat uses), `ingestor` (Ingestor), `file_backends` (FileBackends).
"""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AsyncExitStack
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from functions.embedding_service import EmbeddingService
from functions.files.backends import open_file_backends
from functions.files.embedder import Embedder
from functions.files.files_service import FilesService
from functions.files.ingestion import IngestionMetrics, Ingestor
from functions.files.search import VectorStoreSearch
from functions.files.tenant_data import TenantFiles
from functions.files.vector_stores import VectorStoresService
from shared.fleet.tables import tables
from shared.settings import Settings
from shared.storage.accounts import TenantStore
from shared.wire.http_errors import BodySizeLimitMiddleware

UPLOAD_PATH = "/v1/files"
MULTIPART_SLACK = 64 * 1024  # the form's boundaries, headers and `purpose` field around the file itself


def upload_limit_bytes() -> int:
    """The largest body `POST /v1/files` reads: the largest file any tier accepts, plus the form around it (each
    tier's own bound is checked by the service, with a 413 that names it)."""
    return max(policy.limits.max_file_bytes for policy in tables().tiers.values()) + MULTIPART_SLACK


class BodySizeLimits:
    """The gateway's body-size bound, with uploads to `/v1/files` bounded by `upload_limit_bytes()` instead."""

    def __init__(self, app: ASGIApp, max_bytes: int, upload_max_bytes: int) -> None:
        self.default = BodySizeLimitMiddleware(app, max_bytes)
        self.uploads = BodySizeLimitMiddleware(app, max(max_bytes, upload_max_bytes))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        upload = scope["type"] == "http" and scope.get("method") == "POST" and scope.get("path") == UPLOAD_PATH
        await (self.uploads if upload else self.default)(scope, receive, send)


async def install_files(
    state: Any, settings: Settings, tenants: TenantStore, embeddings: EmbeddingService, owned: AsyncExitStack
) -> None:
    """Open the stores and put the services on `state`; call after the HTTP client is entered (ingestion is
    cancelled before it closes, and resumes at the next start)."""
    backends = open_file_backends(settings)
    owned.callback(backends.close)
    embedder = Embedder(embeddings)
    state.file_backends = backends
    state.ingestor = Ingestor(
        backends, tenants, embedder, state.ingestion_metrics, lease_s=settings.files.ingestion_lease_s
    )
    owned.push_async_callback(state.ingestor.aclose)
    state.files_service = FilesService(backends)
    state.vector_stores = VectorStoresService(backends, state.ingestor)
    state.vector_search = VectorStoreSearch(backends, embedder)
    state.account_data.files = TenantFiles(backends)  # exported and erased with the account
    await state.ingestor.resume()
    # Every lease period, look again: files held by a replica that died are taken over once its lease lapsed.
    watcher = asyncio.create_task(state.ingestor.watch(), name="ingestion watch")
    owned.push_async_callback(_stopped, watcher)


async def _stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def ingestion_metrics(registry: Any) -> IngestionMetrics:
    return IngestionMetrics(registry)

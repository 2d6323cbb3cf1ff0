"""The Batch API's services on the gateway's `app.state`: `batches` (BatchesService) and `batch_runner`, which runs
batches in the background while the gateway is up (settings `batch.run_in_gateway`)."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

from functions.batches.lines import LineRunner
from functions.batches.runner import BatchMetrics, BatchRunner
from functions.batches.service import BatchesService
from shared.settings import Settings
from shared.storage.factory import open_batch_store


def install_batches(state: Any, settings: Settings, owned: AsyncExitStack) -> None:
    """Call after the chat pipeline and the other endpoints' services are on `state` (a line runs through them)."""
    store = open_batch_store(settings)
    owned.callback(store.close)
    lines = LineRunner(state.chat_pipeline, state.responses, state.embeddings, state.completions, state.moderation)
    runner = BatchRunner(store, state.files_service, state.store, lines, settings.batch, state.batch_metrics)
    state.batch_runner = runner
    state.batches = BatchesService(store, state.files_service, runner if settings.batch.run_in_gateway else None)
    state.account_data.batches = store  # erased with the account
    if settings.batch.run_in_gateway:
        runner.start_watching()
        owned.push_async_callback(runner.aclose)


def batch_metrics(registry: Any) -> BatchMetrics:
    return BatchMetrics(registry)

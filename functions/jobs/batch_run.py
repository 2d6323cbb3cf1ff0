"""The batch job: run every active batch to its end, or until the time budget is spent, outside any gateway. Deployed
it is the Modal scheduled function that keeps batches moving while the gateway is scaled to zero (leases make it safe
beside gateways that run batches too); locally, `fleetchat batches run`.

It starts the gateway's own services (create_app's lifespan: stores, the chat pipeline, the endpoints' services)
without serving HTTP, so a line runs exactly as it would in a gateway. A run with nothing to do returns before
loading anything."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from shared.settings import Settings
from shared.storage.factory import open_batch_store


class BatchRunReport(BaseModel):
    active_at_start: int
    started: int = 0
    active_at_end: int = 0


def _active(settings: Settings) -> int:
    store = open_batch_store(settings)
    try:
        return sum(1 for _ in store.active())
    finally:
        store.close()


def run_batches_from_settings(settings: Settings, *, budget_s: float) -> BatchRunReport:
    report = BatchRunReport(active_at_start=_active(settings))
    if report.active_at_start == 0:
        return report
    from functions.app import create_app

    # This process runs batches by draining them below, not with a gateway's background runner.
    quiet = settings.model_copy(update={"batch": settings.batch.model_copy(update={"run_in_gateway": False})})
    app = create_app(quiet)

    async def drained() -> int:
        async with app.router.lifespan_context(app):
            runner = app.state.batch_runner
            started: int = await runner.drain(asyncio.get_running_loop().time() + budget_s)
            await runner.aclose()  # the budget is spent: what still runs stays active under its lease
            return started

    report.started = asyncio.run(drained())
    report.active_at_end = _active(settings)
    return report

"""The vector index's maintenance job: for every store, compaction (small fragments merged, deleted rows' bytes
rewritten away), the BM25 and approximate vector indexes brought up to date (the vector index built once a store
passes `FLEETCHAT_VECTORS_ANN_MIN_ROWS`), and versions older than the purge grace removed with the files only they
held. Deployed, a Modal scheduled function; locally, `fleetchat vectors maintain` (and the gateway needs no job to stay
correct: rows not yet in an index are searched by a scan)."""

from __future__ import annotations

import logging
import time

from pydantic import BaseModel

from functions.files.backends import open_vector_index
from shared.settings import Settings

log = logging.getLogger("fleetchat.files")


class MaintenanceReport(BaseModel):
    stores: int = 0
    rows: int = 0
    compacted: int = 0  # stores whose fragments were rewritten
    vector_indexes_built: int = 0
    versions_removed: int = 0
    failed: int = 0  # stores whose pass raised (logged; the next run tries again)
    seconds: float = 0.0


def maintain_from_settings(settings: Settings, *, purge_now: bool = False) -> MaintenanceReport:
    """One pass over every store. `purge_now`: remove old versions at once (no search may be running: a stopped
    stack, or an erasure that cannot wait for the grace)."""
    report = MaintenanceReport()
    started = time.monotonic()
    index = open_vector_index(settings)
    try:
        for tenant_id, store_id in list(index.stores()):
            report.stores += 1
            try:
                done = index.maintain(tenant_id, store_id, purge_now=purge_now)
            except Exception:
                log.exception("maintenance of vector store %s (tenant %s) failed", store_id, tenant_id)
                report.failed += 1
                continue
            report.rows += done.rows
            report.compacted += int(done.compacted)
            report.vector_indexes_built += int(done.vector_index == "built")
            report.versions_removed += done.versions_removed
    finally:
        index.close()
    report.seconds = round(time.monotonic() - started, 3)
    return report

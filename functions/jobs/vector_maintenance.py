"""The LanceDB indexes' maintenance job. The vector index: for every store, compaction (small fragments
merged, deleted rows' bytes rewritten away), the BM25 and approximate vector indexes brought up to date (the vector
index built once a store passes `FLEETCHAT_VECTORS_ANN_MIN_ROWS`), and versions older than the purge grace removed
with the files only they held. Deployed, a Modal scheduled function; locally, `fleetchat vectors maintain` (and the
gateway needs no job to stay correct: rows not yet in an index are searched by a scan).

The conversation search index, per tenant: the same compaction and BM25 update, and a repair pass
(shared/storage/indexed_conversations.py): messages a gateway stored but never indexed (killed between the two
writes) are indexed, and conversations no longer live are removed (a removal lost the same way)."""

from __future__ import annotations

import logging
import time

from pydantic import BaseModel

from functions.files.backends import open_vector_index
from shared.settings import Settings
from shared.storage.factory import open_conversation_store

log = logging.getLogger("fleetchat.files")


class MaintenanceReport(BaseModel):
    stores: int = 0
    rows: int = 0
    compacted: int = 0  # stores whose fragments were rewritten
    vector_indexes_built: int = 0
    versions_removed: int = 0
    failed: int = 0  # stores whose pass raised (logged; the next run tries again)
    search_tenants: int = 0  # tenants whose conversation search index was maintained
    search_reindexed: int = 0  # conversations the index had missed messages of
    search_removed: int = 0  # conversations in the index that were no longer live
    search_failed: int = 0
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
    _maintain_conversation_search(settings, report)
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _maintain_conversation_search(settings: Settings, report: MaintenanceReport) -> None:
    conversations = open_conversation_store(settings)
    try:
        for tenant_id in list(conversations.index.tenants()):
            report.search_tenants += 1
            try:
                repaired = conversations.repair(tenant_id)
                conversations.index.maintain(tenant_id)
            except Exception:
                log.exception("maintenance of tenant %s's conversation search index failed", tenant_id)
                report.search_failed += 1
                continue
            report.search_reindexed += repaired.reindexed
            report.search_removed += repaired.removed
    finally:
        conversations.close()

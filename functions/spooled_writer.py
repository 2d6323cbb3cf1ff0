"""Write records so none is lost: straight to their store, or, while the store is down, to a local spool file
(appended and fsynced under a file lock) that the next successful write replays. Replays are safe because the
stores are idempotent by record id (the ledger by request id, the safety audit by request id and layer)."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel

from shared.storage.conversations import StoreUnavailableError
from shared.storage.ledger import LedgerEntry, LedgerStore
from shared.storage.safety_audit import SafetyAuditRecord, SafetyAuditStore

log = logging.getLogger("fleetchat.spool")

Record = TypeVar("Record", bound=BaseModel)


class SpooledWriter(Generic[Record]):
    def __init__(self, write: Callable[[Record], object], model: type[Record], spool_path: Path) -> None:
        self.write = write
        self.model = model
        self.spool_path = spool_path
        self._lock = threading.Lock()

    def record(self, record: Record) -> bool:
        """True if the record reached the store now, False if it was spooled for a later replay."""
        try:
            self.write(record)
        except StoreUnavailableError:
            self._spool(record)
            log.warning("%s store unavailable: a record was spooled to %s", self.model.__name__, self.spool_path)
            return False
        if self.spool_path.exists():
            self.replay()
        return True

    def _spool(self, record: Record) -> None:
        self.spool_path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, open(self.spool_path, "a", encoding="utf-8") as spool:
            fcntl.flock(spool, fcntl.LOCK_EX)
            spool.write(record.model_dump_json() + "\n")
            spool.flush()
            os.fsync(spool.fileno())

    def replay(self) -> int:
        """Send every spooled record to the store; the spool is emptied only once all of them are in. Returns how many
        were replayed (0 if the store is still down)."""
        with self._lock:
            try:
                spool = open(self.spool_path, "r+", encoding="utf-8")  # noqa: SIM115 - locked, closed below
            except FileNotFoundError:
                return 0
            with spool:
                fcntl.flock(spool, fcntl.LOCK_EX)
                lines = [line for line in spool.read().splitlines() if line.strip()]
                try:
                    for line in lines:
                        self.write(self.model.model_validate_json(line))
                except StoreUnavailableError:
                    return 0
                spool.seek(0)
                spool.truncate()
                os.fsync(spool.fileno())
        if lines:
            log.info("replayed %d spooled %s records", len(lines), self.model.__name__)
        return len(lines)


class LedgerWriter(SpooledWriter[LedgerEntry]):
    def __init__(self, ledger: LedgerStore, spool_path: Path) -> None:
        super().__init__(ledger.record, LedgerEntry, spool_path)
        self.ledger = ledger


class SafetyAuditWriter(SpooledWriter[SafetyAuditRecord]):
    def __init__(self, audit: SafetyAuditStore, spool_path: Path) -> None:
        super().__init__(audit.record, SafetyAuditRecord, spool_path)
        self.audit = audit

"""Write ledger entries so none is lost: straight to the store, or, while the store is down, to a local spool file
(appended and fsynced under a file lock) that the next successful write replays. Replays are safe: the ledger is
idempotent by request id."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from pathlib import Path

from shared.storage.conversations import StoreUnavailableError
from shared.storage.ledger import LedgerEntry, LedgerStore

log = logging.getLogger("fleetchat.ledger")


class LedgerWriter:
    def __init__(self, ledger: LedgerStore, spool_path: Path) -> None:
        self.ledger = ledger
        self.spool_path = spool_path
        self._lock = threading.Lock()

    def record(self, entry: LedgerEntry) -> bool:
        """True if the entry reached the store now, False if it was spooled for a later replay."""
        try:
            self.ledger.record(entry)
        except StoreUnavailableError:
            self._spool(entry)
            log.warning("ledger store unavailable: request %s spooled to %s", entry.request_id, self.spool_path)
            return False
        if self.spool_path.exists():
            self.replay()
        return True

    def _spool(self, entry: LedgerEntry) -> None:
        self.spool_path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, open(self.spool_path, "a", encoding="utf-8") as spool:
            fcntl.flock(spool, fcntl.LOCK_EX)
            spool.write(entry.model_dump_json() + "\n")
            spool.flush()
            os.fsync(spool.fileno())

    def replay(self) -> int:
        """Send every spooled entry to the store; the spool is emptied only once all of them are in. Returns how many
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
                        self.ledger.record(LedgerEntry.model_validate_json(line))
                except StoreUnavailableError:
                    return 0
                spool.seek(0)
                spool.truncate()
                os.fsync(spool.fileno())
        if lines:
            log.info("replayed %d spooled ledger entries", len(lines))
        return len(lines)

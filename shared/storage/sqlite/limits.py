"""SQLite admission counters: one write transaction per admission, so every process on the file sees one limit."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from shared.storage.limits import (
    COUNTER_RETENTION_S,
    ChargeOutcome,
    MessageCapOutcome,
    WindowCharge,
    WindowCount,
)
from shared.storage.sqlite.db import SQLiteDatabase
from shared.storage.timestamps import from_iso, to_iso


class SQLiteRateLimits:
    def __init__(self, path: Path, *, busy_timeout_s: float = 5.0) -> None:
        self.path = path
        # Counters live for a minute: losing the last commits to a power cut costs at most a few requests of limit,
        # while an fsync per admission would cost milliseconds on every request.
        self._database = SQLiteDatabase(path, busy_timeout_s=busy_timeout_s, durable=False)

    def charge(self, charges: list[WindowCharge]) -> ChargeOutcome:
        with self._database.write() as db:
            found: list[WindowCount] = []
            for charge in charges:
                row = db.execute(
                    "SELECT requests, tokens FROM rate_counters WHERE scope = ? AND window_start = ?",
                    (charge.scope, charge.window_start),
                ).fetchone()
                requests, tokens = (row["requests"], row["tokens"]) if row else (0, 0)
                found.append(
                    WindowCount(scope=charge.scope, window_start=charge.window_start, requests=requests, tokens=tokens)
                )
            for charge, count in zip(charges, found, strict=True):
                refused_by = (
                    "requests"
                    if count.requests + charge.requests > charge.max_requests
                    else "tokens"
                    if count.tokens + charge.tokens > charge.max_tokens
                    else None
                )
                if refused_by is not None:
                    return ChargeOutcome(
                        admitted=False, counts=found, refused_scope=charge.scope, refused_by=refused_by
                    )
            after: list[WindowCount] = []
            for charge, count in zip(charges, found, strict=True):
                db.execute(
                    "INSERT INTO rate_counters (scope, window_start, requests, tokens) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (scope, window_start) DO UPDATE SET requests = requests + excluded.requests,"
                    " tokens = tokens + excluded.tokens",
                    (charge.scope, charge.window_start, charge.requests, charge.tokens),
                )
                after.append(
                    count.model_copy(
                        update={"requests": count.requests + charge.requests, "tokens": count.tokens + charge.tokens}
                    )
                )
            oldest_kept = min(c.window_start for c in charges) - COUNTER_RETENTION_S
            db.execute("DELETE FROM rate_counters WHERE window_start < ?", (oldest_kept,))
        return ChargeOutcome(admitted=True, counts=after)

    def settle(self, scope: str, window_start: int, token_delta: int) -> None:
        if token_delta == 0:
            return
        with self._database.write() as db:
            db.execute(
                "UPDATE rate_counters SET tokens = MAX(0, tokens + ?) WHERE scope = ? AND window_start = ?",
                (token_delta, scope, window_start),
            )

    def record_message(self, subject: str, at: datetime, window_s: int, cap: int) -> MessageCapOutcome:
        since = to_iso(at - timedelta(seconds=window_s))
        with self._database.write() as db:
            db.execute("DELETE FROM message_log WHERE subject = ? AND at <= ?", (subject, since))
            row = db.execute(
                "SELECT COUNT(*) AS used, MIN(at) AS oldest FROM message_log WHERE subject = ?", (subject,)
            ).fetchone()
            used, oldest = int(row["used"]), row["oldest"]
            if used >= cap:
                return MessageCapOutcome(admitted=False, used=used, oldest_at=from_iso(oldest))
            db.execute("INSERT INTO message_log (subject, at) VALUES (?, ?)", (subject, to_iso(at)))
        return MessageCapOutcome(admitted=True, used=used + 1, oldest_at=from_iso(oldest) if oldest else at)

    def forget_message(self, subject: str, at: datetime) -> None:
        with self._database.write() as db:
            db.execute(
                "DELETE FROM message_log WHERE id = (SELECT id FROM message_log WHERE subject = ? AND at = ? LIMIT 1)",
                (subject, to_iso(at)),
            )

    def close(self) -> None:
        self._database.close()

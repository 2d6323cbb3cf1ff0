"""SQLite token ledger and meter-export state: entries keyed by request id, the outbox of meter events, the cursor."""

from __future__ import annotations

import sqlite3
from datetime import date, datetime
from pathlib import Path

from shared.storage.ledger import (
    EMBEDDING_MODEL_PREFIX,
    RERANK_MODEL_PREFIX,
    LedgerEntry,
    MeterSend,
    TenantTotals,
    UsageRow,
)
from shared.storage.sqlite.db import SQLiteDatabase
from shared.storage.timestamps import from_iso, optional_from_iso, to_iso

_SUMS = (
    "COUNT(*) AS requests, SUM(prompt_tokens) AS prompt_tokens, SUM(completion_tokens) AS completion_tokens,"
    " SUM(cached_tokens) AS cached_tokens"
)

# Per tenant: chat's token sums, the embedding and re-rank tokens apart (their entries' models start with their
# prefixes), and
# the batch entries' by the same split, apart again.
_EMBEDDING = f"substr(model, 1, {len(EMBEDDING_MODEL_PREFIX)}) = '{EMBEDDING_MODEL_PREFIX}'"
_RERANK = f"substr(model, 1, {len(RERANK_MODEL_PREFIX)}) = '{RERANK_MODEL_PREFIX}'"
_CHAT = f"NOT {_EMBEDDING} AND NOT {_RERANK}"


def _split(prefix: str, price_class: str) -> str:
    mine = f"price_class = '{price_class}'"
    return (
        f" SUM(CASE WHEN {mine} AND {_CHAT} THEN prompt_tokens ELSE 0 END) AS {prefix}prompt_tokens,"
        f" SUM(CASE WHEN {mine} AND {_CHAT} THEN completion_tokens ELSE 0 END) AS {prefix}completion_tokens,"
        f" SUM(CASE WHEN {mine} AND {_CHAT} THEN cached_tokens ELSE 0 END) AS {prefix}cached_tokens,"
        f" SUM(CASE WHEN {mine} AND {_EMBEDDING} THEN prompt_tokens ELSE 0 END) AS {prefix}embedding_tokens,"
        f" SUM(CASE WHEN {mine} AND {_RERANK} THEN prompt_tokens ELSE 0 END) AS {prefix}rerank_tokens"
    )


_TOTALS = f"COUNT(*) AS requests,{_split('', 'standard')},{_split('batch_', 'batch')}"


class SQLiteLedger:
    def __init__(self, path: Path, *, busy_timeout_s: float = 5.0) -> None:
        self.path = path
        self._database = SQLiteDatabase(path, busy_timeout_s=busy_timeout_s)

    def record(self, entry: LedgerEntry) -> bool:
        with self._database.write() as db:
            cursor = db.execute(
                "INSERT INTO ledger (request_id, tenant_id, key_id, model, prompt_tokens, completion_tokens,"
                " cached_tokens, outcome, created_at, price_class) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (request_id) DO NOTHING",
                (
                    entry.request_id,
                    entry.tenant_id,
                    entry.key_id,
                    entry.model,
                    entry.prompt_tokens,
                    entry.completion_tokens,
                    entry.cached_tokens,
                    entry.outcome.value,
                    to_iso(entry.created_at),
                    entry.price_class,
                ),
            )
            return cursor.rowcount == 1

    def usage(self, tenant_id: str, start: datetime, end: datetime) -> list[UsageRow]:
        with self._database.read() as db:
            rows = db.execute(
                f"SELECT substr(created_at, 1, 10) AS day, model, price_class, {_SUMS} FROM ledger"
                " WHERE tenant_id = ? AND created_at >= ? AND created_at < ?"
                " GROUP BY day, model, price_class ORDER BY day, model, price_class",
                (tenant_id, to_iso(start), to_iso(end)),
            ).fetchall()
        return [UsageRow(**{**dict(row), "day": date.fromisoformat(row["day"])}) for row in rows]

    def totals(self, start: datetime, end: datetime) -> list[TenantTotals]:
        with self._database.read() as db:
            rows = db.execute(
                f"SELECT tenant_id, {_TOTALS} FROM ledger WHERE created_at >= ? AND created_at < ?"
                " GROUP BY tenant_id ORDER BY tenant_id",
                (to_iso(start), to_iso(end)),
            ).fetchall()
        return [TenantTotals(**dict(row)) for row in rows]

    def close(self) -> None:
        self._database.close()


def _send(row: sqlite3.Row) -> MeterSend:
    fields = dict(row)
    fields["window_start"] = from_iso(fields["window_start"])
    fields["sent_at"] = optional_from_iso(fields["sent_at"])
    return MeterSend(**fields)


class SQLiteMeterState:
    def __init__(self, path: Path, *, busy_timeout_s: float = 5.0) -> None:
        self.path = path
        self._database = SQLiteDatabase(path, busy_timeout_s=busy_timeout_s)

    def add_pending(self, send: MeterSend) -> bool:
        with self._database.write() as db:
            cursor = db.execute(
                "INSERT INTO meter_sends (identifier, tenant_id, customer_id, meter, window_start, value, sent_at)"
                " VALUES (?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (identifier) DO NOTHING",
                (send.identifier, send.tenant_id, send.customer_id, send.meter, to_iso(send.window_start), send.value),
            )
            return cursor.rowcount == 1

    def mark_sent(self, identifier: str, at: datetime) -> None:
        with self._database.write() as db:
            db.execute(
                "UPDATE meter_sends SET sent_at = COALESCE(sent_at, ?) WHERE identifier = ?", (to_iso(at), identifier)
            )

    def pending(self) -> list[MeterSend]:
        with self._database.read() as db:
            rows = db.execute(
                "SELECT * FROM meter_sends WHERE sent_at IS NULL ORDER BY window_start, identifier"
            ).fetchall()
        return [_send(row) for row in rows]

    def sends(self, start: datetime, end: datetime) -> list[MeterSend]:
        with self._database.read() as db:
            rows = db.execute(
                "SELECT * FROM meter_sends WHERE window_start >= ? AND window_start < ? ORDER BY window_start,"
                " identifier",
                (to_iso(start), to_iso(end)),
            ).fetchall()
        return [_send(row) for row in rows]

    def get_cursor(self) -> datetime | None:
        with self._database.read() as db:
            row = db.execute("SELECT window_end FROM meter_cursor WHERE id = 1").fetchone()
        return None if row is None else from_iso(row["window_end"])

    def set_cursor(self, window_end: datetime) -> None:
        with self._database.write() as db:
            db.execute(
                "INSERT INTO meter_cursor (id, window_end) VALUES (1, ?)"
                " ON CONFLICT (id) DO UPDATE SET window_end = excluded.window_end",
                (to_iso(window_end),),
            )

    def close(self) -> None:
        self._database.close()

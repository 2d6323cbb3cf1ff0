"""SQLite conversation store (the embedded default): conversations, their messages and the retention audit."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from shared.storage.conversations import (
    AuditRecord,
    Conversation,
    ConversationMeta,
    ConversationNotFoundError,
    ConversationPage,
    StoredMessage,
    SweepCandidate,
    VersionConflictError,
    anchored,
    check_keep,
    check_node,
    decode_list_cursor,
    encode_list_cursor,
    sweep_time,
)
from shared.storage.message_tree import ROOT
from shared.storage.sqlite.db import SQLiteDatabase
from shared.storage.timestamps import from_iso, optional_from_iso, optional_iso, to_iso, utc_now
from shared.wire.responses_api import ResponseRecord

_LIVE = "deleted_at IS NULL AND (expires_at IS NULL OR expires_at > :now)"
# A message's columns after its content: how an answer ended and who answered it (NULL for other roles).
_ANSWERED_BY = ("finish_reason", "model", "pre_policy_version", "post_policy_version", "model_version")


def _calls_json(message: StoredMessage) -> str | None:
    """A message's tool calls as JSON text (key order fixed by the model: read back byte-identical)."""
    if not message.tool_calls:
        return None
    return json.dumps([c.model_dump() for c in message.tool_calls], ensure_ascii=False, separators=(",", ":"))


def _citations_json(message: StoredMessage) -> str | None:
    """An answer's retrieval citations as JSON text (functions/retrieval)."""
    if not message.citations:
        return None
    return json.dumps([c.model_dump(exclude_none=True) for c in message.citations], separators=(",", ":"))


def _runs_json(message: StoredMessage) -> str | None:
    """An answer's server tool runs as JSON text (shared/wire/server_tool_runs.py)."""
    if not message.server_tool_runs:
        return None
    return json.dumps([r.model_dump(mode="json") for r in message.server_tool_runs], ensure_ascii=False)


def _parts_json(message: StoredMessage) -> str | None:
    """A message's content parts (text and checked images) as JSON text; None: text only."""
    if not message.content_parts:
        return None
    return json.dumps([p.model_dump(exclude_none=True) for p in message.content_parts], separators=(",", ":"))


def _meta(row: sqlite3.Row) -> ConversationMeta:
    fields = dict(row)
    fields.pop("sweep_at", None)
    for name in ("created_at", "updated_at", "expires_at", "deleted_at"):
        fields[name] = optional_from_iso(fields[name])
    return ConversationMeta(**fields)


class SQLiteConversationStore:
    def __init__(self, path: Path, *, busy_timeout_s: float = 5.0) -> None:
        self.path = path
        self._database = SQLiteDatabase(path, busy_timeout_s=busy_timeout_s)

    def append_turn(
        self,
        tenant_id: str,
        conversation_id: str,
        *,
        expected_version: int,
        messages: list[StoredMessage],
        expires_at: datetime | None,
        render_version: int,
        title: str | None = None,
        now: datetime | None = None,
        loaded: Conversation | None = None,  # unused: appending rows needs no earlier messages
        keep: int | None = None,
        parent: int | None = None,
    ) -> ConversationMeta:
        now = now or utc_now()
        stamp, expires = to_iso(now), optional_iso(expires_at)
        sweep_at = optional_iso(sweep_time(expires_at, None))
        with self._database.write() as db:
            if expected_version == 0:
                try:
                    db.execute(
                        "INSERT INTO conversations (id, tenant_id, title, created_at, updated_at, version,"
                        " message_count, render_version, expires_at, sweep_at) VALUES (?, ?, ?, ?, ?, 0, 0, ?, ?, ?)",
                        (conversation_id, tenant_id, title, stamp, stamp, render_version, expires, sweep_at),
                    )
                except sqlite3.IntegrityError as exc:
                    raise VersionConflictError(conversation_id, expected_version) from exc
                start, active = 0, ROOT
            else:
                row = db.execute(
                    "SELECT version, message_count, current_node FROM conversations"
                    f" WHERE id = :id AND tenant_id = :tenant AND {_LIVE}",
                    {"id": conversation_id, "tenant": tenant_id, "now": stamp},
                ).fetchone()
                if row is None:
                    raise ConversationNotFoundError(conversation_id)
                if row["version"] != expected_version:
                    raise VersionConflictError(conversation_id, expected_version)
                start = row["message_count"]
                active = start - 1 if row["current_node"] is None else row["current_node"]
                if keep is not None:
                    check_keep(keep, start)
                    db.execute("DELETE FROM messages WHERE conversation_id = ? AND seq >= ?", (conversation_id, keep))
                    start = keep
            if keep is None:
                messages = anchored(messages, active if parent is None else parent, start)
            db.executemany(
                f"INSERT INTO messages (conversation_id, seq, role, content, created_at, {', '.join(_ANSWERED_BY)},"
                f" tool_calls, tool_call_id, citations, response, server_tool_runs, parent, content_parts)"
                f" VALUES (?, ?, ?, ?, ?, {', '.join('?' for _ in _ANSWERED_BY)}, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        conversation_id,
                        start + i,
                        m.role,
                        m.content,
                        to_iso(m.created_at),
                        *(getattr(m, name) for name in _ANSWERED_BY),
                        _calls_json(m),
                        m.tool_call_id,
                        _citations_json(m),
                        m.response.model_dump_json() if m.response is not None else None,
                        _runs_json(m),
                        m.parent,
                        _parts_json(m),
                    )
                    for i, m in enumerate(messages)
                ],
            )
            reset = "" if keep is not None else ", current_node = NULL"  # a turn makes its own branch the active one
            db.execute(
                "UPDATE conversations SET version = version + 1, message_count = ?, updated_at = ?,"
                f" expires_at = ?, sweep_at = ?{reset} WHERE id = ?",
                (start + len(messages), stamp, expires, sweep_at, conversation_id),
            )
            row = db.execute("SELECT * FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return _meta(row)

    def get_meta(self, tenant_id: str, conversation_id: str, *, now: datetime | None = None) -> ConversationMeta | None:
        with self._database.read() as db:
            row = db.execute(
                f"SELECT * FROM conversations WHERE id = :id AND tenant_id = :tenant AND {_LIVE}",
                {"id": conversation_id, "tenant": tenant_id, "now": to_iso(now or utc_now())},
            ).fetchone()
        return None if row is None else _meta(row)

    def get(self, tenant_id: str, conversation_id: str, *, now: datetime | None = None) -> Conversation | None:
        with self._database.read() as db:
            row = db.execute(
                f"SELECT * FROM conversations WHERE id = :id AND tenant_id = :tenant AND {_LIVE}",
                {"id": conversation_id, "tenant": tenant_id, "now": to_iso(now or utc_now())},
            ).fetchone()
            if row is None:
                return None
            rows = db.execute(
                f"SELECT role, content, created_at, {', '.join(_ANSWERED_BY)}, tool_calls, tool_call_id, citations,"
                " response, server_tool_runs, parent, content_parts"
                " FROM messages"
                " WHERE conversation_id = ? ORDER BY seq",
                (conversation_id,),
            ).fetchall()
        messages = [
            StoredMessage(
                role=r["role"],
                content=r["content"],
                created_at=from_iso(r["created_at"]),
                **{name: r[name] for name in _ANSWERED_BY},
                tool_calls=json.loads(r["tool_calls"]) if r["tool_calls"] else None,
                tool_call_id=r["tool_call_id"],
                citations=json.loads(r["citations"]) if r["citations"] else None,
                response=ResponseRecord.model_validate_json(r["response"]) if r["response"] else None,
                server_tool_runs=json.loads(r["server_tool_runs"]) if r["server_tool_runs"] else None,
                parent=r["parent"],
                content_parts=json.loads(r["content_parts"]) if r["content_parts"] else None,
            )
            for r in rows
        ]
        return Conversation(**_meta(row).model_dump(), messages=messages)

    def list(
        self, tenant_id: str, *, limit: int = 20, cursor: str | None = None, now: datetime | None = None
    ) -> ConversationPage:
        params: dict[str, object] = {"tenant": tenant_id, "now": to_iso(now or utc_now()), "limit": limit + 1}
        after = ""
        if cursor is not None:
            position, params["after_id"] = decode_list_cursor(cursor)
            params["after_updated"] = position.split("#", 1)[0]
            after = "AND (updated_at, id) < (:after_updated, :after_id)"
        with self._database.read() as db:
            rows = db.execute(
                f"SELECT * FROM conversations WHERE tenant_id = :tenant AND {_LIVE} {after}"
                " ORDER BY updated_at DESC, id DESC LIMIT :limit",
                params,
            ).fetchall()
        page = rows[:limit]
        more = len(rows) > limit
        next_cursor = encode_list_cursor(f"{page[-1]['updated_at']}#{page[-1]['id']}") if more and page else None
        return ConversationPage(items=[_meta(r) for r in page], next_cursor=next_cursor)

    def rename(
        self, tenant_id: str, conversation_id: str, title: str, *, now: datetime | None = None
    ) -> ConversationMeta | None:
        with self._database.write() as db:
            row = db.execute(
                f"UPDATE conversations SET title = :title WHERE id = :id AND tenant_id = :tenant AND {_LIVE}"
                " RETURNING *",
                {"title": title, "id": conversation_id, "tenant": tenant_id, "now": to_iso(now or utc_now())},
            ).fetchone()
        return None if row is None else _meta(row)

    def set_instructions(
        self, tenant_id: str, conversation_id: str, instructions: str | None, *, now: datetime | None = None
    ) -> ConversationMeta | None:
        with self._database.write() as db:
            row = db.execute(
                "UPDATE conversations SET instructions = :instructions"
                f" WHERE id = :id AND tenant_id = :tenant AND {_LIVE} RETURNING *",
                {"instructions": instructions, "id": conversation_id, "tenant": tenant_id,
                 "now": to_iso(now or utc_now())},
            ).fetchone()  # fmt: skip
        return None if row is None else _meta(row)

    def set_current_node(
        self, tenant_id: str, conversation_id: str, node: int, *, now: datetime | None = None
    ) -> ConversationMeta | None:
        where = {"id": conversation_id, "tenant": tenant_id, "now": to_iso(now or utc_now())}
        with self._database.write() as db:
            row = db.execute(
                f"SELECT * FROM conversations WHERE id = :id AND tenant_id = :tenant AND {_LIVE}", where
            ).fetchone()
            if row is None:
                return None
            check_node(node, row["message_count"])
            row = db.execute(
                "UPDATE conversations SET current_node = :node WHERE id = :id RETURNING *", {**where, "node": node}
            ).fetchone()
        return _meta(row)

    def soft_delete(self, tenant_id: str, conversation_id: str, *, now: datetime | None = None) -> bool:
        now = now or utc_now()
        with self._database.write() as db:
            row = db.execute(
                f"SELECT expires_at FROM conversations WHERE id = :id AND tenant_id = :tenant AND {_LIVE}",
                {"id": conversation_id, "tenant": tenant_id, "now": to_iso(now)},
            ).fetchone()
            if row is None:
                return False
            sweep_at = sweep_time(optional_from_iso(row["expires_at"]), now)
            db.execute(
                "UPDATE conversations SET deleted_at = ?, sweep_at = ? WHERE id = ?",
                (to_iso(now), optional_iso(sweep_at), conversation_id),
            )
        return True

    def reschedule(self, tenant_id: str, conversation_id: str, expires_at: datetime | None) -> None:
        with self._database.write() as db:
            row = db.execute(
                "SELECT deleted_at FROM conversations WHERE id = ? AND tenant_id = ?", (conversation_id, tenant_id)
            ).fetchone()
            if row is None:
                return
            sweep_at = sweep_time(expires_at, optional_from_iso(row["deleted_at"]))
            db.execute(
                "UPDATE conversations SET expires_at = ?, sweep_at = ? WHERE id = ?",
                (optional_iso(expires_at), optional_iso(sweep_at), conversation_id),
            )

    def sweep_candidates(self, now: datetime) -> Iterator[SweepCandidate]:
        with self._database.read() as db:
            rows = db.execute(
                "SELECT tenant_id, id, updated_at, expires_at, deleted_at FROM conversations"
                " WHERE sweep_at IS NOT NULL AND sweep_at <= ? ORDER BY sweep_at",
                (to_iso(now),),
            ).fetchall()
        for row in rows:
            yield SweepCandidate(
                tenant_id=row["tenant_id"],
                conversation_id=row["id"],
                updated_at=from_iso(row["updated_at"]),
                expires_at=optional_from_iso(row["expires_at"]),
                deleted_at=optional_from_iso(row["deleted_at"]),
            )

    def is_stored(self, tenant_id: str, conversation_id: str) -> bool:
        with self._database.read() as db:
            row = db.execute(
                "SELECT 1 FROM conversations WHERE id = ? AND tenant_id = ?", (conversation_id, tenant_id)
            ).fetchone()
        return row is not None

    def hard_delete(self, tenant_id: str, conversation_id: str, audit: AuditRecord) -> bool:
        with self._database.write() as db:
            gone = db.execute(
                "DELETE FROM conversations WHERE id = ? AND tenant_id = ?", (conversation_id, tenant_id)
            ).rowcount
            if gone:
                self._audit(db, audit)
        return bool(gone)

    def erase_tenant(self, tenant_id: str, audit: AuditRecord) -> int:
        with self._database.write() as db:
            gone = db.execute("DELETE FROM conversations WHERE tenant_id = ?", (tenant_id,)).rowcount
            self._audit(db, audit)
        return gone

    def export_tenant(self, tenant_id: str, *, now: datetime | None = None) -> Iterator[Conversation]:
        now = now or utc_now()
        cursor: str | None = None
        while True:
            page = self.list(tenant_id, limit=100, cursor=cursor, now=now)
            for meta in page.items:
                conversation = self.get(tenant_id, meta.id, now=now)
                if conversation is not None:
                    yield conversation
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    @staticmethod
    def _audit(db: sqlite3.Connection, audit: AuditRecord) -> None:
        db.execute(
            "INSERT INTO retention_audit (at, actor, action, tenant_id, conversation_id, detail)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (to_iso(audit.at), audit.actor, audit.action, audit.tenant_id, audit.conversation_id, audit.detail),
        )

    def audit_log(self, *, limit: int = 100) -> list[AuditRecord]:
        with self._database.read() as db:
            rows = db.execute("SELECT * FROM retention_audit ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [
            AuditRecord(
                at=from_iso(r["at"]),
                actor=r["actor"],
                action=r["action"],
                tenant_id=r["tenant_id"],
                conversation_id=r["conversation_id"],
                detail=r["detail"],
            )
            for r in rows
        ]

    def close(self) -> None:
        self._database.close()

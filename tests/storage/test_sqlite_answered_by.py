"""Answers stored before messages recorded who answered them: the SQLite migration adds the columns to an existing
database (its rows read back None), and an S3 body written before reads back None too."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from shared.storage.aws.layout import Body
from shared.storage.conversations import StoredMessage, new_conversation_id
from shared.storage.sqlite.conversations import SQLiteConversationStore
from shared.storage.sqlite.db import MIGRATIONS
from tests.storage.contracts.test_conversation_contract import T0, TENANT, msgs

COLUMNS = ("model", "pre_policy_version", "post_policy_version")


def _migration() -> int:
    """The number of the migration that adds the columns (found, not hard-coded: other migrations may follow)."""
    return next(
        number
        for number, statements in enumerate(MIGRATIONS, start=1)
        if any("messages ADD COLUMN model" in statement for statement in statements)
    )


def _roll_back(raw: sqlite3.Connection, to_version: int) -> None:
    """Undo the migrations after `to_version`, newest first (added columns, tables and indexes are all they do)."""
    for statements in reversed(MIGRATIONS[to_version:]):
        for statement in reversed(statements):
            if added := re.match(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", statement):
                raw.execute(f"ALTER TABLE {added[1]} DROP COLUMN {added[2]}")
            elif created := re.match(r"\s*CREATE TABLE (\w+)", statement):
                raw.execute(f"DROP TABLE {created[1]}")
            elif indexed := re.match(r"\s*CREATE INDEX (\w+)", statement):
                raw.execute(f"DROP INDEX {indexed[1]}")
            else:
                raise AssertionError(f"cannot undo a migration statement: {statement[:80]}")
    raw.execute(f"PRAGMA user_version={to_version}")
    columns = {row[1] for row in raw.execute("PRAGMA table_info(messages)")}
    assert not columns & set(COLUMNS)


def test_the_migration_keeps_older_answers_and_they_read_back_without_a_model(tmp_path: Path) -> None:
    path = tmp_path / "fleetchat.db"
    store = SQLiteConversationStore(path)
    conv_id = new_conversation_id()
    store.append_turn(
        TENANT, conv_id, expected_version=0, messages=msgs(("user", "q"), ("assistant", "an old answer")),
        expires_at=None, render_version=1, now=T0,
    )  # fmt: skip
    store.close()
    # The database as the release before the migration left it: this migration and every later one undone.
    raw = sqlite3.connect(path)
    _roll_back(raw, to_version=_migration() - 1)
    raw.commit()
    raw.close()

    store = SQLiteConversationStore(path)
    try:
        got = store.get(TENANT, conv_id, now=T0)
        assert got is not None and [m.content for m in got.messages] == ["q", "an old answer"]
        assert all(m.model is None and m.pre_policy_version is None for m in got.messages)
        answered = StoredMessage(role="assistant", content="a new one", created_at=T0, model="mini")
        store.append_turn(
            TENANT, conv_id, expected_version=1, messages=[*msgs(("user", "more")), answered], expires_at=None,
            render_version=1, now=T0,
        )  # fmt: skip
        got = store.get(TENANT, conv_id, now=T0)
        assert got is not None and [m.model for m in got.messages] == [None, None, None, "mini"]
    finally:
        store.close()


def test_an_s3_body_written_before_reads_back_without_a_model() -> None:
    old = '{"version": 1, "message_count": 1, "messages": [{"role": "assistant", "content": "hi", '
    old += '"created_at": "2026-11-01T12:00:00Z", "finish_reason": "stop"}]}'
    [message] = Body.model_validate_json(old).messages
    assert (message.content, message.finish_reason) == ("hi", "stop")
    assert all(getattr(message, column) is None for column in COLUMNS)

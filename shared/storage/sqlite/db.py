"""The embedded SQLite database: one WAL-mode file, its versioned schema migrations, and its transactions."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from shared.storage.conversations import StoreUnavailableError

# The error codes that mean "the store cannot serve now" (503), as opposed to a bug in our SQL.
_UNAVAILABLE_CODES = frozenset(
    getattr(sqlite3, name)
    for name in ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_IOERR", "SQLITE_FULL", "SQLITE_CANTOPEN", "SQLITE_READONLY")
)


def _unavailable(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and (code & 0xFF) in _UNAVAILABLE_CODES


# Append-only: migration N+1 runs on a database at version N. Never edit a shipped migration.
# Statements run one by one inside one transaction (executescript would commit half-way).
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE tenants (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            tier TEXT NOT NULL,
            created_at TEXT NOT NULL
        )""",
        """CREATE TABLE api_keys (
            id TEXT PRIMARY KEY,
            tenant_id TEXT NOT NULL REFERENCES tenants(id),
            key_hash TEXT NOT NULL UNIQUE,
            label TEXT NOT NULL,
            created_at TEXT NOT NULL,
            revoked_at TEXT
        )""",
        "CREATE INDEX api_keys_tenant ON api_keys(tenant_id)",
    ],
    [
        # Enterprise retention: days of inactivity (NULL = the tier's default) and legal hold.
        "ALTER TABLE tenants ADD COLUMN retention_days INTEGER",
        "ALTER TABLE tenants ADD COLUMN legal_hold INTEGER NOT NULL DEFAULT 0",
        """CREATE TABLE conversations (
            id TEXT PRIMARY KEY,
            tenant_id TEXT NOT NULL,
            title TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            version INTEGER NOT NULL,
            message_count INTEGER NOT NULL,
            render_version INTEGER NOT NULL,
            expires_at TEXT,
            deleted_at TEXT,
            sweep_at TEXT
        )""",
        "CREATE INDEX conversations_by_updated ON conversations(tenant_id, updated_at DESC, id DESC)",
        "CREATE INDEX conversations_by_sweep ON conversations(sweep_at) WHERE sweep_at IS NOT NULL",
        """CREATE TABLE messages (
            conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (conversation_id, seq)
        ) WITHOUT ROWID""",
        """CREATE TABLE retention_audit (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            at TEXT NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            tenant_id TEXT NOT NULL,
            conversation_id TEXT,
            detail TEXT NOT NULL
        )""",
    ],
    [
        # Accounts: users, per-tenant limit overrides and billing customer, key owners and hints, admin keys.
        "ALTER TABLE tenants ADD COLUMN limits TEXT",
        "ALTER TABLE tenants ADD COLUMN stripe_customer_id TEXT",
        """CREATE TABLE users (
            id TEXT PRIMARY KEY,
            tenant_id TEXT NOT NULL REFERENCES tenants(id),
            email TEXT NOT NULL,
            name TEXT,
            created_at TEXT NOT NULL,
            UNIQUE (tenant_id, email)
        )""",
        "ALTER TABLE api_keys ADD COLUMN user_id TEXT REFERENCES users(id)",
        "ALTER TABLE api_keys ADD COLUMN hint TEXT NOT NULL DEFAULT ''",
        """CREATE TABLE admin_keys (
            id TEXT PRIMARY KEY,
            key_hash TEXT NOT NULL UNIQUE,
            label TEXT NOT NULL,
            created_at TEXT NOT NULL,
            revoked_at TEXT
        )""",
        # Admission: fixed-window RPM/TPM counters and the rolling message log of the message cap.
        """CREATE TABLE rate_counters (
            scope TEXT NOT NULL,
            window_start INTEGER NOT NULL,
            requests INTEGER NOT NULL,
            tokens INTEGER NOT NULL,
            PRIMARY KEY (scope, window_start)
        ) WITHOUT ROWID""",
        "CREATE INDEX rate_counters_by_window ON rate_counters(window_start)",
        """CREATE TABLE message_log (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            subject TEXT NOT NULL,
            at TEXT NOT NULL
        )""",
        "CREATE INDEX message_log_by_subject ON message_log(subject, at)",
        # The token ledger (idempotent by request id) and the meter exporter's outbox and cursor.
        """CREATE TABLE ledger (
            request_id TEXT PRIMARY KEY,
            tenant_id TEXT NOT NULL,
            key_id TEXT,
            model TEXT NOT NULL,
            prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            cached_tokens INTEGER NOT NULL,
            outcome TEXT NOT NULL,
            created_at TEXT NOT NULL
        )""",
        "CREATE INDEX ledger_by_tenant ON ledger(tenant_id, created_at)",
        "CREATE INDEX ledger_by_time ON ledger(created_at)",
        """CREATE TABLE meter_sends (
            identifier TEXT PRIMARY KEY,
            tenant_id TEXT NOT NULL,
            customer_id TEXT NOT NULL,
            meter TEXT NOT NULL,
            window_start TEXT NOT NULL,
            value INTEGER NOT NULL,
            sent_at TEXT
        )""",
        "CREATE INDEX meter_sends_by_window ON meter_sends(window_start)",
        """CREATE TABLE meter_cursor (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            window_end TEXT NOT NULL
        )""",
    ],
    [
        # Safety: per-tenant overrides (JSON like limits) and the audit of every block and halt, idempotent by
        # (request, layer); listed per tenant by time, swept by expiry (the partial index holds only expiring rows).
        "ALTER TABLE tenants ADD COLUMN safety TEXT",
        """CREATE TABLE safety_audit (
            request_id TEXT NOT NULL,
            layer TEXT NOT NULL,
            tenant_id TEXT NOT NULL,
            key_id TEXT,
            at TEXT NOT NULL,
            detector TEXT NOT NULL,
            category TEXT NOT NULL,
            score REAL NOT NULL,
            policy_version TEXT NOT NULL,
            action TEXT NOT NULL,
            model TEXT NOT NULL,
            content TEXT,
            expires_at TEXT,
            PRIMARY KEY (request_id, layer)
        ) WITHOUT ROWID""",
        "CREATE INDEX safety_audit_by_tenant ON safety_audit(tenant_id, at)",
        "CREATE INDEX safety_audit_by_expiry ON safety_audit(expires_at) WHERE expires_at IS NOT NULL",
    ],
    [
        # How an assistant answer ended (the web chat marks stopped and filtered answers).
        "ALTER TABLE messages ADD COLUMN finish_reason TEXT",
    ],
    [
        # Answer feedback: one row per (tenant, conversation, message index); no content but the comment.
        """CREATE TABLE feedback (
            tenant_id TEXT NOT NULL,
            conversation_id TEXT NOT NULL,
            message_index INTEGER NOT NULL,
            rating TEXT NOT NULL,
            comment TEXT,
            created_at TEXT NOT NULL,
            key_id TEXT,
            message_created_at TEXT NOT NULL,
            answer_sha256 TEXT NOT NULL,
            model TEXT,
            model_source TEXT,
            pre_policy_version TEXT,
            post_policy_version TEXT,
            PRIMARY KEY (tenant_id, conversation_id, message_index)
        ) WITHOUT ROWID""",
    ],
    [
        # Who answered an assistant message: the model (pool) and the safety policies of its turn (NULL: stored
        # before they were kept).
        "ALTER TABLE messages ADD COLUMN model TEXT",
        "ALTER TABLE messages ADD COLUMN pre_policy_version TEXT",
        "ALTER TABLE messages ADD COLUMN post_policy_version TEXT",
    ],
    [
        # What a tenant is for: customer, or the eval job's own tenants (excluded from billing).
        "ALTER TABLE tenants ADD COLUMN purpose TEXT NOT NULL DEFAULT 'customer'",
    ],
    [
        # The model version that answered an assistant message (a pool's canary or its stable version).
        "ALTER TABLE messages ADD COLUMN model_version TEXT",
    ],
    [
        # Server-side tools (issue 22): one audit row per tool run, listed per tenant by time; no content unless
        # the tenant's policy allows it.
        """CREATE TABLE tool_audit (
            run_id TEXT PRIMARY KEY,
            request_id TEXT NOT NULL,
            tenant_id TEXT NOT NULL,
            key_id TEXT,
            at TEXT NOT NULL,
            tool TEXT NOT NULL,
            status TEXT NOT NULL,
            duration_ms INTEGER NOT NULL,
            exit_code INTEGER,
            input TEXT,
            output TEXT
        ) WITHOUT ROWID""",
        "CREATE INDEX tool_audit_by_tenant ON tool_audit(tenant_id, at)",
    ],
    [
        # Tool turns: an assistant message's tool calls (JSON) and the call a tool message answers.
        "ALTER TABLE messages ADD COLUMN tool_calls TEXT",
        "ALTER TABLE messages ADD COLUMN tool_call_id TEXT",
    ],
    [
        # Files and vector stores (issue 23, docs/files.md): metadata here, bodies in the data dir; the embedded
        # vector index (shared/storage/sqlite/vector_index.py) keeps one row per chunk, its vector a float32 blob.
        """CREATE TABLE files (
            tenant_id TEXT NOT NULL,
            id TEXT NOT NULL,
            filename TEXT NOT NULL,
            purpose TEXT NOT NULL,
            bytes INTEGER NOT NULL,
            kind TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (tenant_id, id)
        ) WITHOUT ROWID""",
        """CREATE TABLE vector_stores (
            tenant_id TEXT NOT NULL,
            id TEXT NOT NULL,
            name TEXT NOT NULL,
            created_at TEXT NOT NULL,
            last_active_at TEXT NOT NULL,
            embedding_model TEXT NOT NULL,
            metadata TEXT NOT NULL,
            expires_after_days INTEGER,
            PRIMARY KEY (tenant_id, id)
        ) WITHOUT ROWID""",
        """CREATE TABLE vector_store_files (
            tenant_id TEXT NOT NULL,
            vector_store_id TEXT NOT NULL,
            file_id TEXT NOT NULL,
            created_at TEXT NOT NULL,
            status TEXT NOT NULL,
            error_code TEXT,
            error_message TEXT,
            usage_bytes INTEGER NOT NULL,
            chunks INTEGER NOT NULL,
            key_id TEXT,
            attributes TEXT NOT NULL,
            PRIMARY KEY (tenant_id, vector_store_id, file_id)
        ) WITHOUT ROWID""",
        "CREATE INDEX vector_store_files_by_file ON vector_store_files(tenant_id, file_id)",
        "CREATE INDEX vector_store_files_pending ON vector_store_files(status) WHERE status = 'in_progress'",
        """CREATE TABLE vector_chunks (
            tenant_id TEXT NOT NULL,
            vector_store_id TEXT NOT NULL,
            file_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            chunk_id TEXT NOT NULL,
            text TEXT NOT NULL,
            start_offset INTEGER NOT NULL,
            end_offset INTEGER NOT NULL,
            heading TEXT,
            vector BLOB NOT NULL,
            PRIMARY KEY (tenant_id, vector_store_id, file_id, seq)
        ) WITHOUT ROWID""",
        # Bumped by every write to a store's chunks: a process's cached matrix is reloaded when it moved.
        """CREATE TABLE vector_generations (
            tenant_id TEXT NOT NULL,
            vector_store_id TEXT NOT NULL,
            generation INTEGER NOT NULL,
            PRIMARY KEY (tenant_id, vector_store_id)
        ) WITHOUT ROWID""",
        # Retrieval in chat: the citations of an assistant message (JSON list; NULL: none).
        "ALTER TABLE messages ADD COLUMN citations TEXT",
    ],
    [
        # Ingestion leases (shared/storage/files.py: FileStore.claim): which gateway ingests an in_progress
        # attachment, and until when, so two replicas resuming it never both do the work.
        "ALTER TABLE vector_store_files ADD COLUMN claim_owner TEXT",
        "ALTER TABLE vector_store_files ADD COLUMN claim_until TEXT",
    ],
    [
        # The Responses API: a stored response's record, kept with its answer (JSON; NULL: not a stored response).
        "ALTER TABLE messages ADD COLUMN response TEXT",
    ],
    [
        # Batch lines are billed at the batch price (shared/storage/ledger.py: PriceClass).
        "ALTER TABLE ledger ADD COLUMN price_class TEXT NOT NULL DEFAULT 'standard'",
        # Batches (shared/storage/batches.py): the batch as JSON beside the columns its queries use, and each line's
        # result as it finishes.
        """CREATE TABLE batches (
            tenant_id TEXT NOT NULL,
            id TEXT NOT NULL,
            status TEXT NOT NULL,
            created_at TEXT NOT NULL,
            record TEXT NOT NULL,
            PRIMARY KEY (tenant_id, id)
        ) WITHOUT ROWID""",
        "CREATE INDEX batches_by_status ON batches(status)",
        "CREATE INDEX batches_by_created ON batches(tenant_id, created_at DESC, id DESC)",
        """CREATE TABLE batch_lines (
            tenant_id TEXT NOT NULL,
            batch_id TEXT NOT NULL,
            line INTEGER NOT NULL,
            record TEXT NOT NULL,
            PRIMARY KEY (tenant_id, batch_id, line)
        ) WITHOUT ROWID""",
        # A file's own expiry (shared/storage/files.py: StoredFile.expires_at; NULL: none).
        "ALTER TABLE files ADD COLUMN expires_at TEXT",
    ],
    [
        # The whole-sandbox limits a tool run ran into (issue 53): a JSON list, "processes" and/or "memory".
        "ALTER TABLE tool_audit ADD COLUMN limits_hit TEXT NOT NULL DEFAULT '[]'",
    ],
    [
        # The gateway's own tool runs behind an answer, as the client saw them (issue 50: the code interpreter in the
        # web chat): a JSON list of shared/wire/server_tool_runs.py views; NULL: none.
        "ALTER TABLE messages ADD COLUMN server_tool_runs TEXT",
        # Custom instructions (issue 50 item 3): a conversation's own, and the account's (NULL: none).
        "ALTER TABLE conversations ADD COLUMN instructions TEXT",
        "ALTER TABLE tenants ADD COLUMN instructions TEXT",
    ],
    [
        # The message tree (issue 50 item 2): a message's parent where it is not the message before it (NULL:
        # implicit, so every older row reads as one chain), and a conversation's active branch (NULL: the newest).
        "ALTER TABLE messages ADD COLUMN parent INTEGER",
        "ALTER TABLE conversations ADD COLUMN current_node INTEGER",
    ],
    [
        # Memory (issue 50 item 3): the facts an account asked to be remembered, as JSON (shared/storage/memory.py).
        "ALTER TABLE tenants ADD COLUMN memory TEXT",
    ],
    [
        # Share links (issue 50 item 4): read-only snapshots found by their token's SHA-256 (shared/storage/shares.py),
        # and a tenant's choice to turn sharing off.
        """CREATE TABLE shares (
            id TEXT PRIMARY KEY,
            token_hash TEXT NOT NULL UNIQUE,
            tenant_id TEXT NOT NULL,
            conversation_id TEXT NOT NULL,
            title TEXT,
            messages TEXT NOT NULL,
            created_at TEXT NOT NULL,
            expires_at TEXT NOT NULL
        )""",
        "CREATE INDEX shares_by_conversation ON shares (tenant_id, conversation_id, created_at)",
        "ALTER TABLE tenants ADD COLUMN sharing_disabled INTEGER NOT NULL DEFAULT 0",
    ],
    [
        # Image input (issue 50 item 7): a user message's content parts with its images as data URIs, as JSON (NULL:
        # text only).
        "ALTER TABLE messages ADD COLUMN content_parts TEXT",
    ],
]


class SQLiteDatabase:
    """Thread-safe: one connection guarded by a lock; WAL lets other processes read while one writes.

    `synchronous=FULL`: a committed transaction survives a power cut, not only a killed process (`durable=False`
    relaxes that to NORMAL for data worth less than an fsync per write, such as one-minute rate counters).
    """

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout_s: float = 5.0,
        durable: bool = True,
        migrations: list[list[str]] = MIGRATIONS,
    ) -> None:
        """`migrations`: the file's schema (the main database's unless a file of its own has another)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        # How long to wait for another process's write lock before the store counts as unavailable.
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=busy_timeout_s)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        # Not durable (rate counters): NORMAL still never corrupts the file; a power cut may lose the last commits.
        self._db.execute("PRAGMA synchronous=FULL" if durable else "PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        with self.write() as db:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            for number, statements in enumerate(migrations[version:], start=version + 1):
                for statement in statements:
                    db.execute(statement)
                db.execute(f"PRAGMA user_version={number}")

    @property
    def schema_version(self) -> int:
        with self._lock:
            return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (taken at once, so concurrent writers queue instead of deadlocking)."""
        with self._transaction("BEGIN IMMEDIATE") as db:
            yield db

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """One consistent snapshot for several SELECTs."""
        with self._transaction("BEGIN") as db:
            yield db

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute(begin)
            except sqlite3.Error as exc:
                if _unavailable(exc):
                    raise StoreUnavailableError(f"SQLite store unavailable: {exc}") from exc
                raise
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error) and _unavailable(exc):
                    raise StoreUnavailableError(f"SQLite store unavailable: {exc}") from exc
                raise

    def close(self) -> None:
        with self._lock:
            self._db.close()

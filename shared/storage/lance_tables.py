"""What both LanceDB indexes share (the vector stores' and the conversation search's): the connection with bounded
caches and its open tables (`LanceTables`), safe table names, SQL literals for filters, a table's own URI, compaction
that rewrites deleted rows away, and the retry on a concurrent writer's commit."""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterator
from datetime import timedelta
from typing import Any

from tenacity import retry, retry_if_exception, stop_after_attempt, wait_random_exponential

log = logging.getLogger("fleetchat.lance")
_SAFE = re.compile(r"[A-Za-z0-9_]+")

# A commit that lost to another writer's (another gateway replica's) is tried again on the latest version.
retry_on_commit_conflict = retry(
    retry=retry_if_exception(lambda exc: "retryable commit conflict" in str(exc).lower()),
    stop=stop_after_attempt(5),
    wait=wait_random_exponential(multiplier=0.2, max=5),
    reraise=True,
)


def name_part(value: str) -> str:
    """An id as a table-name part: letters, digits and `_` as they are (every id this service makes), any other id as
    `-` and its hex (table names allow letters, digits, `_`, `-` and `.`; a `-` never starts a plain id)."""
    return value if _SAFE.fullmatch(value) else "-" + value.encode().hex()


def name_unpart(value: str) -> str:
    return bytes.fromhex(value[1:]).decode() if value.startswith("-") else value


def sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def sql_in(column: str, values: Collection[str]) -> str:
    return f"{column} IN ({', '.join(sql_literal(v) for v in values)})"


def table_uri(root_uri: str, name: str) -> str:
    """A table's own URI: the root's path, the table's directory, the root's query (the commit table)."""
    root, _, query = root_uri.partition("?")
    return f"{root.rstrip('/')}/{name}.lance" + (f"?{query}" if query else "")


def connect(uri: str, storage_options: dict[str, str] | None, consistency: timedelta, cache_bytes: int) -> Any:
    """A LanceDB connection whose index and metadata caches are bounded (a gateway searching many big tables holds at
    most this much of their indexes). Imported here, on first use: importing LanceDB takes a second."""
    import lancedb

    session = lancedb.Session(index_cache_size_bytes=cache_bytes, metadata_cache_size_bytes=cache_bytes // 4)
    return lancedb.connect(uri, storage_options=storage_options, read_consistency_interval=consistency, session=session)


@retry_on_commit_conflict
def compacted(table: Any, uri: str, storage_options: dict[str, str] | None) -> Any:
    """Compaction that rewrites every fragment holding a deleted row (LanceDB's own optimize waits for 10 % of a
    fragment): deleted text leaves the table's files at the first pass, not some day. A writer that committed meanwhile
    makes it start again from the latest version. `uri`: the table's own (`table_uri`)."""
    import lance

    # Opened by its own URI, not `table.to_lance()`: that drops the `s3+ddb` scheme, and a commit that bypasses the
    # DynamoDB commit store is invisible to every writer that uses it.
    dataset = lance.dataset(uri, storage_options=storage_options)
    metrics = dataset.optimize.compact_files(materialize_deletions_threshold=0.0)
    table.checkout_latest()
    return metrics


class LanceTables:
    """One LanceDB connection and its tables: the connection made on first use (importing LanceDB takes a second; a
    gateway no one asks to search never pays it), at most `cached` open table handles kept (least recently used go
    first; each holds a little metadata, the data stays on disk or in S3), tables made with a BM25 index on their
    `text` column, and every `compact_every` writes to a table (per process) its compaction and index update."""

    def __init__(
        self,
        uri: str,
        storage_options: dict[str, str] | None,
        *,
        read_consistency_s: float,
        cache_bytes: int,
        purge_grace_s: float,
        compact_every: int,
        cached: int = 256,
    ) -> None:
        self.uri = uri
        self.storage_options = storage_options
        self.purge_grace = timedelta(seconds=purge_grace_s)
        self.compact_every = compact_every
        self._consistency = timedelta(seconds=read_consistency_s)
        self._cache_bytes = cache_bytes
        self._cached = cached
        self._connection: Any = None
        self._open: OrderedDict[str, Any] = OrderedDict()
        self._writes: dict[str, int] = {}  # writes per table since this process last compacted it
        self._lock = threading.Lock()

    @property
    def db(self) -> Any:
        with self._lock:
            if self._connection is None:
                self._connection = connect(self.uri, self.storage_options, self._consistency, self._cache_bytes)
            return self._connection

    def open(self, name: str) -> Any | None:
        """The table's handle, or None where there is no such table."""
        with self._lock:
            if (table := self._open.get(name)) is not None:
                self._open.move_to_end(name)
                return table
        try:
            table = self.db.open_table(name)
        except ValueError:  # "Table ... was not found"
            return None
        return self._remember(name, table)

    def create(self, name: str, schema: Any) -> Any:
        """The table, made with `schema` and a BM25 index on `text` where it is missing (another writer may make it at
        the same moment: both get the one table)."""
        from lancedb.index import FTS

        table = self.db.create_table(name, schema=schema, exist_ok=True)
        if not any(i.index_type == "FTS" for i in table.list_indices()):
            try:
                table.create_index("text", config=FTS(), replace=False)
            except Exception:  # another writer made it a moment ago: fine if it is there now
                if not any(i.index_type == "FTS" for i in table.list_indices()):
                    raise
        return self._remember(name, table)

    def _remember(self, name: str, table: Any) -> Any:
        with self._lock:
            self._open[name] = table
            while len(self._open) > self._cached:
                self._open.popitem(last=False)
        return table

    def forget(self, name: str) -> None:
        """Drop the handle (its table was dropped, perhaps by another replica)."""
        with self._lock:
            self._open.pop(name, None)

    def drop(self, name: str) -> None:
        """The table and its files go at once."""
        self.forget(name)
        self.db.drop_table(name, ignore_missing=True)

    def wrote(self, name: str, table: Any) -> None:
        """Count a write; every `compact_every`, compact the table and update its indexes (old versions past the grace
        go too). A failure here (another writer's compaction won the commit) is left to the next one or the job."""
        with self._lock:
            self._writes[name] = self._writes.get(name, 0) + 1
            due = self._writes[name] >= self.compact_every
            if due:
                self._writes[name] = 0
        if due:
            try:
                table.optimize(cleanup_older_than=self.purge_grace)
            except Exception:
                log.warning("compacting the LanceDB table %s failed; the next write or the job retries", name)

    def names(self) -> Iterator[str]:
        """Every table's name, a page at a time."""
        token: str | None = None
        while True:
            page = self.db.list_tables(page_token=token, limit=1000)
            yield from page.tables
            token = page.page_token
            if not token:
                return

    def close(self) -> None:
        with self._lock:
            self._open.clear()

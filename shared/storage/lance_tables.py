"""What both LanceDB indexes share (the vector stores' and the conversation search's): the connection with bounded
caches, safe table names, SQL literals for filters, a table's own URI, and the retry on a concurrent writer's commit."""

from __future__ import annotations

import re
from collections.abc import Collection
from datetime import timedelta
from typing import Any

from tenacity import retry, retry_if_exception, stop_after_attempt, wait_random_exponential

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

"""The conversation search index on LanceDB: a table per tenant (one row per searchable message, BM25 over its text),
in a directory locally and under the conversations bucket deployed, beside the vector stores' tables.

A table per tenant is the isolation (a search reads only its tenant's table) and makes an account's erasure a
`drop_table`, which deletes the files at once. Rows are keyed `<conversation>:<message id>`, so indexing a message
again replaces it (merge-insert). New rows are searched before the BM25 index covers them (Lance scans what the index
has not seen); `maintain` (the scheduled job) compacts the table and brings the index up to date, and the writer does
the same every `compact_every` writes, as the vector index does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from shared.storage.conversation_search import MessageHit, SearchableMessage
from shared.storage.lance_tables import (
    LanceTables,
    compacted,
    name_part,
    name_unpart,
    retry_on_commit_conflict,
    sql_literal,
    table_uri,
)

log = logging.getLogger("fleetchat.conversations")
_COLUMNS = ["conversation_id", "message_id", "role", "text", "created_at"]


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("row_id", pa.string(), nullable=False),
            pa.field("conversation_id", pa.string(), nullable=False),
            pa.field("message_id", pa.int32(), nullable=False),
            pa.field("role", pa.string(), nullable=False),
            pa.field("text", pa.string(), nullable=False),
            pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
            # How many messages the conversation stored when this row was written (the repair pass's watermark).
            pa.field("through", pa.int32(), nullable=False),
        ]
    )


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class LanceConversationSearch:
    """`ConversationSearchIndex` on LanceDB at `uri`: a directory, or `s3+ddb://bucket/prefix?ddbTableName=T`."""

    def __init__(
        self,
        uri: str,
        storage_options: dict[str, str] | None = None,
        *,
        read_consistency_s: float = 0.0,
        purge_grace_s: float = 300.0,
        cache_bytes: int = 256 * 1024 * 1024,
        compact_every: int = 64,
    ) -> None:
        self.uri = uri
        self._storage_options = storage_options
        self._lance = LanceTables(
            uri, storage_options, read_consistency_s=read_consistency_s, cache_bytes=cache_bytes,
            purge_grace_s=purge_grace_s, compact_every=compact_every,
        )  # fmt: skip

    def _open(self, tenant_id: str) -> Any | None:
        return self._lance.open(name_part(tenant_id))

    def _create(self, tenant_id: str) -> Any:
        return self._lance.create(name_part(tenant_id), _schema())

    # -- writes -------------------------------------------------------------------------------------------------

    @retry_on_commit_conflict
    def add(
        self,
        tenant_id: str,
        conversation_id: str,
        messages: Sequence[SearchableMessage],
        *,
        through: int,
        from_id: int | None = None,
    ) -> None:
        table = self._open(tenant_id) or self._create(tenant_id)
        if from_id is not None:
            where = f"conversation_id = {sql_literal(conversation_id)} AND message_id >= {int(from_id)}"
            table.delete(where)
        rows = [
            {
                "row_id": f"{conversation_id}:{m.message_id}",
                "conversation_id": conversation_id,
                "message_id": m.message_id,
                "role": m.role,
                "text": m.text,
                "created_at": _aware(m.created_at),
                "through": through,
            }
            for m in messages
        ]
        if not rows:  # a turn with nothing to search (a tool round): its watermark still moves
            rows = [self._watermark(conversation_id, through)]
        import pyarrow as pa

        batch = pa.Table.from_pylist(rows, schema=_schema())
        table.merge_insert("row_id").when_matched_update_all().when_not_matched_insert_all().execute(batch)
        self._lance.wrote(name_part(tenant_id), table)

    @staticmethod
    def _watermark(conversation_id: str, through: int) -> dict[str, Any]:
        """A row with no text (never found by words) that records how far the conversation was indexed."""
        return {
            "row_id": f"{conversation_id}:through",
            "conversation_id": conversation_id,
            "message_id": -1,
            "role": "",
            "text": "",
            "created_at": datetime.now(UTC),
            "through": through,
        }

    @retry_on_commit_conflict
    def remove_conversation(self, tenant_id: str, conversation_id: str) -> None:
        if (table := self._open(tenant_id)) is not None:
            table.delete(f"conversation_id = {sql_literal(conversation_id)}")
            self._lance.wrote(name_part(tenant_id), table)

    def drop_tenant(self, tenant_id: str) -> None:
        self._lance.drop(name_part(tenant_id))

    # -- reads --------------------------------------------------------------------------------------------------

    def search(self, tenant_id: str, text: str, limit: int) -> list[MessageHit]:
        if limit <= 0 or not text.strip() or (table := self._open(tenant_id)) is None:
            return []
        try:
            rows = (
                table.search(text, query_type="fts", fts_columns="text")
                .select([*_COLUMNS, "_score"])
                .limit(limit)
                .to_list()
            )
        except (RuntimeError, OSError, ValueError) as exc:
            if "not found" not in str(exc).lower():
                raise
            self._lance.forget(name_part(tenant_id))  # the table was dropped (an erasure on another replica)
            return []
        return [
            MessageHit(
                conversation_id=row["conversation_id"],
                message_id=int(row["message_id"]),
                role=row["role"],
                text=row["text"],
                created_at=row["created_at"],
                score=float(row["_score"]),
            )
            for row in rows
            if float(row["_score"]) > 0.0 and int(row["message_id"]) >= 0
        ]

    def indexed_through(self, tenant_id: str) -> dict[str, int]:
        if (table := self._open(tenant_id)) is None:
            return {}
        rows = table.search().select(["conversation_id", "through"]).limit(None).to_arrow()
        through: dict[str, int] = {}
        for conversation_id, count in zip(
            rows.column("conversation_id").to_pylist(), rows.column("through").to_pylist(), strict=True
        ):
            through[conversation_id] = max(through.get(conversation_id, 0), int(count))
        return through

    def tenants(self) -> Iterator[str]:
        return (name_unpart(name) for name in self._lance.names())

    # -- maintenance --------------------------------------------------------------------------------------------

    def maintain(self, tenant_id: str) -> int:
        if (table := self._open(tenant_id)) is None:
            return 0
        table.checkout_latest()
        # Deleted conversations' text leaves the files now; then the BM25 index takes in new rows and versions older
        # than the grace go, with the files only they held.
        compacted(table, table_uri(self.uri, name_part(tenant_id)), self._storage_options)
        table.optimize(cleanup_older_than=self._lance.purge_grace)
        return int(table.count_rows())

    def close(self) -> None:
        self._lance.close()

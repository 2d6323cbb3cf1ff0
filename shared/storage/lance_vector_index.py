"""The vector stores' search engine: LanceDB, one table per (tenant, store), searched by vector (exact below a size,
IVF-HNSW above it) and by BM25 (Lance's inverted index), in a directory locally and in S3 deployed.

Why LanceDB (docs/retrieval-engines.md has the measurements): it is embedded (no server; a directory of Lance files
locally, the same files under an S3 prefix deployed, DynamoDB as the commit store that makes concurrent writers safe),
and it has what a vector store needs in one engine: approximate vector indexes, full-text search with BM25, filters
evaluated before the search, row-level deletes and upserts, compaction and index maintenance.

Layout. A table `<tenant>.<store>` holds one row per chunk (its text, offsets, heading and unit-length float32 vector);
one table per store isolates tenants (a search can only read its own table) and makes erasure a `drop_table`, which
deletes the table's files at once. A file's chunks are replaced by one merge-insert (one commit: rows of the file that
are not in the new set are deleted in the same transaction), so a crash never leaves a file half-indexed.

Every write adds a fragment and a version; every `compact_every` writes to a table (per process) the writer compacts
it and brings its indexes up to date (LanceDB's optimize): without it, one small file at a time, each write scans
more fragments than the last (measured: 89 files/s falling to 4 by the 1,500th; with it, 38-89 files/s at 3,000).

Deletes only mark rows; their bytes stay in the table's files until the maintenance pass (`maintain`, the scheduled
job functions/jobs/vector_maintenance.py) rewrites every fragment that holds a deleted row and removes versions older
than the purge grace. Dropping a store or a tenant deletes its files at once.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import timedelta
from typing import Any, Literal, TypeVar

import numpy as np

from shared.storage.lance_tables import (
    LanceTables,
    compacted,
    name_part,
    name_unpart,
    sql_in,
    sql_literal,
    table_uri,
)
from shared.storage.vector_index import ChunkHit, IndexedChunk, Maintained, normalised

log = logging.getLogger("fleetchat.files")
T = TypeVar("T")
_CACHED_TABLES = 256  # open table handles kept (each holds a little metadata; the data stays on disk or in S3)
_IN_BATCH = 500  # ids per `IN (...)` filter
_COLUMNS = ["chunk_id", "file_id", "seq", "text", "start", "end", "heading"]
# Rows per IVF partition when the approximate index is built (LanceDB's guidance: a few thousand).
_ROWS_PER_PARTITION = 4096


def table_name(tenant_id: str, store_id: str) -> str:
    """`<tenant>.<store>`, each id as a safe name part (shared/storage/lance_tables.py)."""
    return f"{name_part(tenant_id)}.{name_part(store_id)}"


def _schema(dims: int) -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("chunk_id", pa.string(), nullable=False),
            pa.field("file_id", pa.string(), nullable=False),
            pa.field("seq", pa.int32(), nullable=False),
            pa.field("text", pa.string(), nullable=False),
            pa.field("start", pa.int64(), nullable=False),
            pa.field("end", pa.int64(), nullable=False),
            pa.field("heading", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), dims), nullable=False),
        ]
    )


def _hit(row: dict[str, Any], score: float) -> ChunkHit:
    return ChunkHit(
        file_id=row["file_id"],
        chunk_id=row["chunk_id"],
        seq=int(row["seq"]),
        text=row["text"],
        start=int(row["start"]),
        end=int(row["end"]),
        heading=row["heading"],
        score=score,
    )


class LanceVectorIndex:
    """`VectorIndex` on LanceDB at `uri`: a directory, or `s3+ddb://bucket/prefix?ddbTableName=T` deployed."""

    def __init__(
        self,
        uri: str,
        storage_options: dict[str, str] | None = None,
        *,
        ann_min_rows: int = 10_000,
        ann_nprobes: int = 20,
        ann_refine_factor: int = 4,
        read_consistency_s: float = 0.0,
        purge_grace_s: float = 300.0,
        cache_bytes: int = 1024 * 1024 * 1024,
        compact_every: int = 32,
    ) -> None:
        self.uri = uri
        self.ann_min_rows = ann_min_rows
        self.ann_nprobes = ann_nprobes
        self.ann_refine_factor = ann_refine_factor
        self.purge_grace = timedelta(seconds=purge_grace_s)
        self._storage_options = storage_options
        self._lance = LanceTables(
            uri, storage_options, read_consistency_s=read_consistency_s, cache_bytes=cache_bytes,
            purge_grace_s=purge_grace_s, compact_every=compact_every, cached=_CACHED_TABLES,
        )  # fmt: skip

    # -- tables -------------------------------------------------------------------------------------------------

    def _open(self, tenant_id: str, store_id: str) -> Any | None:
        return self._lance.open(table_name(tenant_id, store_id))

    def _create(self, tenant_id: str, store_id: str, dims: int) -> Any:
        return self._lance.create(table_name(tenant_id, store_id), _schema(dims))

    @staticmethod
    def _dims(table: Any) -> int:
        return int(table.schema.field("vector").type.list_size)

    # -- writes -------------------------------------------------------------------------------------------------

    def replace_file(self, tenant_id: str, store_id: str, file_id: str, chunks: Sequence[IndexedChunk]) -> None:
        if not chunks:
            self.remove_file(tenant_id, store_id, file_id)
            return
        matrix = normalised(np.stack([np.asarray(c.vector, dtype=np.float32).reshape(-1) for c in chunks]))
        table = self._open(tenant_id, store_id) or self._create(tenant_id, store_id, matrix.shape[1])
        if self._dims(table) != matrix.shape[1]:
            raise ValueError(f"the chunks have {matrix.shape[1]} dimensions; the store's index has {self._dims(table)}")
        if len({c.chunk_id for c in chunks}) != len(chunks) or any(c.file_id != file_id for c in chunks):
            raise ValueError("a file's chunks need distinct chunk ids and that file's id")
        import pyarrow as pa

        batch = pa.table(
            {
                "chunk_id": [c.chunk_id for c in chunks],
                "file_id": [file_id] * len(chunks),
                "seq": pa.array([c.seq for c in chunks], pa.int32()),
                "text": [c.text for c in chunks],
                "start": pa.array([c.start for c in chunks], pa.int64()),
                "end": pa.array([c.end for c in chunks], pa.int64()),
                "heading": pa.array([c.heading for c in chunks], pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), matrix.shape[1]),
            },
            schema=_schema(matrix.shape[1]),
        )
        # One commit: the file's new chunks in, its chunks that are not among them out (a shorter new version).
        (
            table.merge_insert("chunk_id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .when_not_matched_by_source_delete(f"file_id = {sql_literal(file_id)}")
            .execute(batch)
        )
        self._lance.wrote(table_name(tenant_id, store_id), table)

    def remove_file(self, tenant_id: str, store_id: str, file_id: str) -> None:
        if (table := self._open(tenant_id, store_id)) is not None:
            table.delete(f"file_id = {sql_literal(file_id)}")
            self._lance.wrote(table_name(tenant_id, store_id), table)

    def drop_store(self, tenant_id: str, store_id: str) -> None:
        self._lance.drop(table_name(tenant_id, store_id))

    def drop_tenant(self, tenant_id: str) -> None:
        for tenant, store in list(self.stores()):
            if tenant == tenant_id:
                self.drop_store(tenant, store)

    # -- reads --------------------------------------------------------------------------------------------------

    def _read(self, tenant_id: str, store_id: str, read: Callable[[Any], T], missing: T) -> T:
        """`read(table)`, or `missing` where the store has no table; a handle whose table another replica dropped
        (and may have made again) is opened afresh once."""
        for attempt in (1, 2):
            table = self._open(tenant_id, store_id)
            if table is None:
                return missing
            try:
                return read(table)
            except (RuntimeError, OSError, ValueError) as exc:
                if attempt == 2 or "not found" not in str(exc).lower():
                    raise
                self._lance.forget(table_name(tenant_id, store_id))
        raise AssertionError("unreachable")

    def search(
        self, tenant_id: str, store_id: str, vector: np.ndarray, k: int, file_ids: Collection[str] | None = None
    ) -> list[ChunkHit]:
        if k <= 0 or (file_ids is not None and not file_ids):
            return []
        query = np.asarray(vector, dtype=np.float32).reshape(-1)

        def read(table: Any) -> list[ChunkHit]:
            if query.shape[0] != self._dims(table):
                raise ValueError(f"query has {query.shape[0]} dimensions; the index has {self._dims(table)}")
            search = (
                table.search(normalised(query.reshape(1, -1))[0], vector_column_name="vector")
                .distance_type("cosine")
                .nprobes(self.ann_nprobes)
                .refine_factor(self.ann_refine_factor)
                .select([*_COLUMNS, "_distance"])
                .limit(k)
            )
            if file_ids is not None:
                search = search.where(sql_in("file_id", file_ids), prefilter=True)
            return [_hit(row, 1.0 - float(row["_distance"])) for row in search.to_list()]

        return self._read(tenant_id, store_id, read, [])

    def keyword_search(
        self, tenant_id: str, store_id: str, text: str, k: int, file_ids: Collection[str] | None = None
    ) -> list[ChunkHit]:
        if k <= 0 or not text.strip() or (file_ids is not None and not file_ids):
            return []

        def read(table: Any) -> list[ChunkHit]:
            search = table.search(text, query_type="fts", fts_columns="text").select([*_COLUMNS, "_score"]).limit(k)
            if file_ids is not None:
                search = search.where(sql_in("file_id", file_ids), prefilter=True)
            return [_hit(row, float(row["_score"])) for row in search.to_list() if float(row["_score"]) > 0.0]

        return self._read(tenant_id, store_id, read, [])

    def chunks(self, tenant_id: str, store_id: str, file_id: str | None = None) -> Iterator[ChunkHit]:
        def files(table: Any) -> list[str]:
            column = table.search().select(["file_id"]).limit(None).to_arrow().column("file_id")
            return sorted(set(column.to_pylist()))

        for one in self._read(tenant_id, store_id, files, []) if file_id is None else [file_id]:
            # A file at a time: a big store is never read whole into memory.
            rows = self._read(
                tenant_id,
                store_id,
                lambda table, one=one: table.search().where(f"file_id = {sql_literal(one)}").select(_COLUMNS)
                .limit(None).to_list(),
                [],
            )  # fmt: skip
            yield from (_hit(row, 0.0) for row in sorted(rows, key=lambda r: int(r["seq"])))

    def count(self, tenant_id: str, store_id: str, file_id: str | None = None) -> int:
        where = None if file_id is None else f"file_id = {sql_literal(file_id)}"
        return self._read(tenant_id, store_id, lambda table: int(table.count_rows(where)), 0)

    def revision(self, tenant_id: str, store_id: str) -> str:
        return self._read(tenant_id, store_id, lambda table: str(table.version), "0")

    def vectors(self, tenant_id: str, store_id: str, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        wanted = list(dict.fromkeys(chunk_ids))

        def read(table: Any) -> dict[str, np.ndarray]:
            found: dict[str, np.ndarray] = {}
            for start in range(0, len(wanted), _IN_BATCH):
                rows = (
                    table.search()
                    .where(sql_in("chunk_id", wanted[start : start + _IN_BATCH]))
                    .select(["chunk_id", "vector"])
                    .limit(None)
                    .to_arrow()
                )
                ids = rows.column("chunk_id").to_pylist()
                matrix = np.asarray(rows.column("vector").combine_chunks().flatten(), dtype=np.float32)
                found.update((chunk_id, row) for chunk_id, row in zip(ids, matrix.reshape(len(ids), -1), strict=True))
            return found

        return self._read(tenant_id, store_id, read, {})

    def stores(self) -> Iterator[tuple[str, str]]:
        for name in self._lance.names():
            tenant, _, store = name.partition(".")
            if store:
                yield name_unpart(tenant), name_unpart(store)

    # -- maintenance --------------------------------------------------------------------------------------------

    def maintain(self, tenant_id: str, store_id: str, *, purge_now: bool = False) -> Maintained:
        table = self._open(tenant_id, store_id)
        if table is None:
            return Maintained(rows=0, compacted=False, vector_index="none", versions_removed=0)
        table.checkout_latest()
        before = len(table.list_versions())
        metrics = compacted(table, table_uri(self.uri, table_name(tenant_id, store_id)), self._storage_options)
        rows = int(table.count_rows())
        vector_index: Literal["none", "built", "updated"] = "none"
        indexed = [i.columns for i in table.list_indices()]
        # Scalar indexes on the ids: a chunk's vector read back for the re-rank, a file's rows counted, deleted or
        # filtered are index lookups, not scans (measured at 1M chunks: 49 ms to 4 ms for 18 vectors, 18 to 0.6 ms
        # for a file's count).
        for column in ("chunk_id", "file_id"):
            if [column] not in indexed:
                from lancedb.index import BTree

                table.create_index(column, config=BTree())
        has_ann = ["vector"] in indexed
        if not has_ann and rows >= self.ann_min_rows:
            from lancedb.index import HnswSq

            partitions = max(1, rows // _ROWS_PER_PARTITION)
            table.create_index("vector", config=HnswSq(distance_type="cosine", num_partitions=partitions))
            vector_index = "built"
        elif has_ann:
            vector_index = "updated"
        # Adds new rows to the indexes (BM25 and vectors), then deletes versions older than the grace and the files
        # only they reference.
        with warnings.catch_warnings():  # purge_now's every-version removal is what was asked for
            warnings.filterwarnings("ignore", message=r"optimize\(cleanup_older_than=0\)", category=UserWarning)
            table.optimize(cleanup_older_than=timedelta(0) if purge_now else self.purge_grace)
        after = len(table.list_versions())
        return Maintained(
            rows=rows,
            compacted=bool(metrics.fragments_removed),
            vector_index=vector_index,
            versions_removed=max(0, before - after),
        )

    def close(self) -> None:
        self._lance.close()

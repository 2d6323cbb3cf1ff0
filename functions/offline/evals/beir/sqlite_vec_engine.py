"""The retrieval benchmark's sqlite-vec competitor: `SqliteVecIndex`, a `VectorIndex` subset on one SQLite file, exact
KNN by sqlite-vec's vec0 (cosine) and BM25 by FTS5 (porter, unicode61), compared against `LanceVectorIndex`.

Layout. A registry table `stores` gives each (tenant, store) a small integer id `n` and three tables of its own: `c<n>`
(one row per chunk: ids, offsets, heading, text), `f<n>` (FTS5 over `c<n>.text` as external content, kept in step by
triggers) and `v<n>` (vec0: the unit-length float32 vector and a `file_id` metadata column, keyed by the chunk's rowid).
Tables per store, not shared tables with tenant/store columns, because FTS5's BM25 statistics (document frequencies,
average length) are per table: per-store tables rank as Lance's per-store tables do and keep one tenant's words out of
another's scores. vec0 then needs no partition key; its `file_id` metadata column filters inside the KNN, so `k`
matching chunks come back, not `k` chunks then filtered.

Writes. `replace_file` is one transaction (apsw's `with connection`; a failure rolls all of it back): the file's
rows, and rows elsewhere holding one of its new chunk ids (Lance's merge-insert on `chunk_id` would move them), are
deleted and the new ones inserted with `executemany` under rowids allotted from `max(rowid)`. Each write bumps the
store's `revision`. WAL with synchronous=NORMAL: commits are atomic but fsynced at checkpoints, not each one.

Limits. vec0's KNN caps `k` at 4096 (larger `k` is clamped). vec0 deletes zero a vector's slot but do not shrink its
chunk blobs; `maintain` merges FTS5's segments (`optimize`) and, with `purge_now`, checkpoints the WAL; it never
VACUUMs. Needs an SQLite that loads extensions: apsw's bundled one (the stdlib module here cannot).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Collection, Sequence
from typing import Any

import apsw
import numpy as np
import sqlite_vec

from shared.storage.vector_index import ChunkHit, IndexedChunk, Maintained, normalised

_WORD = re.compile(r"[^\W_]+")  # what unicode61 keeps as a token's characters, roughly
_MAX_K = 4096  # vec0's KNN limit
_IN_BATCH = 500
_COLUMNS = "c.chunk_id, c.file_id, c.seq, c.text, c.start, c.end, c.heading"


def fts_query(text: str) -> str | None:
    """`text` as a safe FTS5 query: each distinct word token quoted, OR-ed (no operators, columns or syntax errors
    survive); None where it has no word."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))
    return " OR ".join(f'"{w}"' for w in words) or None


def _hit(row: Sequence[Any], score: float) -> ChunkHit:
    chunk_id, file_id, seq, text, start, end, heading = row[:7]
    return ChunkHit(
        file_id=file_id, chunk_id=chunk_id, seq=seq, text=text, start=start, end=end, heading=heading, score=score
    )


class SqliteVecIndex:
    """`VectorIndex` (no chunks/stores/drop_*) on the SQLite file at `path`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._db = apsw.Connection(path)
        self._db.enable_load_extension(True)
        self._db.load_extension(sqlite_vec.loadable_path())
        self._db.enable_load_extension(False)
        # One statement each: apsw runs a string's later statements only as its cursor is read past the first's rows.
        # WAL with synchronous=NORMAL: a commit is atomic and never corrupts, but is fsynced at checkpoints, not each.
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "cache_size=-262144"):  # cache: 256 MiB
            self._db.execute(f"PRAGMA {pragma}").fetchall()
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS stores (n INTEGER PRIMARY KEY, tenant_id TEXT NOT NULL, store_id TEXT NOT NULL,"
            " dims INTEGER NOT NULL, revision INTEGER NOT NULL DEFAULT 0, UNIQUE (tenant_id, store_id))"
        )
        self._lock = threading.RLock()
        self._ids: dict[tuple[str, str], tuple[int, int]] = {}  # (tenant, store) -> (n, dims)

    # -- stores -------------------------------------------------------------------------------------------------

    def _store(self, tenant_id: str, store_id: str) -> tuple[int, int] | None:
        key = (tenant_id, store_id)
        if key not in self._ids:
            row = self._db.execute("SELECT n, dims FROM stores WHERE tenant_id = ? AND store_id = ?", key).fetchone()
            if row is None:
                return None
            self._ids[key] = (int(row[0]), int(row[1]))
        return self._ids[key]

    def _create(self, tenant_id: str, store_id: str, dims: int) -> tuple[int, int]:
        """The store's three tables and its triggers (inside the caller's transaction)."""
        self._db.execute("INSERT INTO stores (tenant_id, store_id, dims) VALUES (?, ?, ?)", (tenant_id, store_id, dims))
        n = self._db.last_insert_rowid()
        self._db.execute(
            f"""
            CREATE TABLE c{n} (rowid INTEGER PRIMARY KEY, chunk_id TEXT NOT NULL UNIQUE, file_id TEXT NOT NULL,
                seq INTEGER NOT NULL, text TEXT NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL, heading TEXT);
            CREATE INDEX c{n}_file ON c{n} (file_id, seq);
            CREATE VIRTUAL TABLE f{n} USING fts5(text, content='c{n}', content_rowid='rowid',
                tokenize='porter unicode61');
            CREATE TRIGGER c{n}_ai AFTER INSERT ON c{n} BEGIN
                INSERT INTO f{n} (rowid, text) VALUES (new.rowid, new.text); END;
            CREATE TRIGGER c{n}_ad AFTER DELETE ON c{n} BEGIN
                INSERT INTO f{n} (f{n}, rowid, text) VALUES ('delete', old.rowid, old.text); END;
            CREATE VIRTUAL TABLE v{n} USING vec0(file_id TEXT, embedding float[{dims}] distance_metric=cosine);
            """
        )
        self._ids[(tenant_id, store_id)] = (n, dims)
        return n, dims

    # -- writes -------------------------------------------------------------------------------------------------

    def replace_file(self, tenant_id: str, store_id: str, file_id: str, chunks: Sequence[IndexedChunk]) -> None:
        if not chunks:
            self.remove_file(tenant_id, store_id, file_id)
            return
        matrix = normalised(np.stack([np.asarray(c.vector, dtype=np.float32).reshape(-1) for c in chunks]))
        if len({c.chunk_id for c in chunks}) != len(chunks) or any(c.file_id != file_id for c in chunks):
            raise ValueError("a file's chunks need distinct chunk ids and that file's id")
        with self._lock:
            try:
                with self._db:  # one transaction: commits, or rolls back as a whole
                    self._write(tenant_id, store_id, file_id, chunks, matrix)
            except BaseException:
                self._ids.pop((tenant_id, store_id), None)  # a store made in the rolled-back transaction is not there
                raise

    def _write(
        self, tenant_id: str, store_id: str, file_id: str, chunks: Sequence[IndexedChunk], matrix: np.ndarray
    ) -> None:
        n, dims = self._store(tenant_id, store_id) or self._create(tenant_id, store_id, matrix.shape[1])
        if dims != matrix.shape[1]:
            raise ValueError(f"the chunks have {matrix.shape[1]} dimensions; the store's index has {dims}")
        # The file's old chunks, and any chunk elsewhere under one of its new ids (moved here, as Lance's upsert would);
        # two indexed selects, not one `OR` that scans the table.
        self._delete(
            n,
            f"SELECT rowid FROM c{n} WHERE file_id = ? UNION "
            f"SELECT rowid FROM c{n} WHERE chunk_id IN (SELECT value FROM json_each(?))",
            (file_id, json.dumps([c.chunk_id for c in chunks])),
        )
        first = int(self._db.execute(f"SELECT coalesce(max(rowid), 0) + 1 FROM c{n}").fetchone()[0])
        self._db.executemany(
            f'INSERT INTO c{n} (rowid, chunk_id, file_id, seq, text, start, "end", heading) '
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(first + i, c.chunk_id, file_id, c.seq, c.text, c.start, c.end, c.heading) for i, c in enumerate(chunks)],
        )
        self._db.executemany(
            f"INSERT INTO v{n} (rowid, file_id, embedding) VALUES (?, ?, ?)",
            [(first + i, file_id, row.tobytes()) for i, row in enumerate(matrix)],
        )
        self._bump(n)

    def remove_file(self, tenant_id: str, store_id: str, file_id: str) -> None:
        with self._lock, self._db:
            store = self._store(tenant_id, store_id)
            if store is not None and self._delete(
                store[0], f"SELECT rowid FROM c{store[0]} WHERE file_id = ?", (file_id,)
            ):
                self._bump(store[0])

    def _delete(self, n: int, select: str, params: tuple[Any, ...]) -> int:
        """The chunks whose rowids `select` gives gone from all three tables (FTS5 by trigger); how many."""
        rowids = [(r[0],) for r in self._db.execute(select, params)]
        if rowids:
            self._db.executemany(f"DELETE FROM v{n} WHERE rowid = ?", rowids)
            self._db.executemany(f"DELETE FROM c{n} WHERE rowid = ?", rowids)
        return len(rowids)

    def _bump(self, n: int) -> None:
        self._db.execute("UPDATE stores SET revision = revision + 1 WHERE n = ?", (n,))

    # -- reads --------------------------------------------------------------------------------------------------

    def search(
        self, tenant_id: str, store_id: str, vector: np.ndarray, k: int, file_ids: Collection[str] | None = None
    ) -> list[ChunkHit]:
        if k <= 0 or (file_ids is not None and not file_ids):
            return []
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        with self._lock:
            if (store := self._store(tenant_id, store_id)) is None:
                return []
            n, dims = store
            if query.shape[0] != dims:
                raise ValueError(f"query has {query.shape[0]} dimensions; the index has {dims}")
            where, params = "embedding MATCH ? AND k = ?", [normalised(query).tobytes(), min(k, _MAX_K)]
            if file_ids is not None:
                where += " AND file_id IN (SELECT value FROM json_each(?))"
                params.append(json.dumps(list(file_ids)))
            rows = self._db.execute(
                f"WITH knn AS (SELECT rowid, distance FROM v{n} WHERE {where}) "
                f"SELECT {_COLUMNS}, knn.distance FROM knn JOIN c{n} c ON c.rowid = knn.rowid ORDER BY knn.distance",
                params,
            ).fetchall()
        return [_hit(row, 1.0 - float(row[7])) for row in rows]

    def keyword_search(
        self, tenant_id: str, store_id: str, text: str, k: int, file_ids: Collection[str] | None = None
    ) -> list[ChunkHit]:
        if k <= 0 or (match := fts_query(text)) is None or (file_ids is not None and not file_ids):
            return []
        with self._lock:
            if (store := self._store(tenant_id, store_id)) is None:
                return []
            n = store[0]
            where, params = f"f{n} MATCH ?", [match]
            if file_ids is not None:
                where += (
                    f" AND f{n}.rowid IN (SELECT rowid FROM c{n} WHERE file_id IN (SELECT value FROM json_each(?)))"
                )
                params.append(json.dumps(list(file_ids)))
            rows = self._db.execute(
                f"WITH ranked AS (SELECT rowid, bm25(f{n}) AS rank FROM f{n} WHERE {where} ORDER BY rank LIMIT ?) "
                f"SELECT {_COLUMNS}, ranked.rank FROM ranked JOIN c{n} c ON c.rowid = ranked.rowid "
                "ORDER BY ranked.rank",
                [*params, k],
            ).fetchall()
        return [_hit(row, -float(row[7])) for row in rows if -float(row[7]) > 0.0]

    def vectors(self, tenant_id: str, store_id: str, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        wanted = list(dict.fromkeys(chunk_ids))
        found: dict[str, np.ndarray] = {}
        with self._lock:
            if (store := self._store(tenant_id, store_id)) is None:
                return found
            n = store[0]
            for start in range(0, len(wanted), _IN_BATCH):
                rows = self._db.execute(
                    f"SELECT c.chunk_id, v.embedding FROM c{n} c JOIN v{n} v ON v.rowid = c.rowid "
                    "WHERE c.chunk_id IN (SELECT value FROM json_each(?))",
                    (json.dumps(wanted[start : start + _IN_BATCH]),),
                )
                found.update((chunk_id, np.frombuffer(blob, dtype=np.float32).copy()) for chunk_id, blob in rows)
        return found

    def count(self, tenant_id: str, store_id: str, file_id: str | None = None) -> int:
        with self._lock:
            if (store := self._store(tenant_id, store_id)) is None:
                return 0
            if file_id is None:
                return int(self._db.execute(f"SELECT count(*) FROM c{store[0]}").fetchone()[0])
            return int(
                self._db.execute(f"SELECT count(*) FROM c{store[0]} WHERE file_id = ?", (file_id,)).fetchone()[0]
            )

    def revision(self, tenant_id: str, store_id: str) -> str:
        with self._lock:
            row = self._db.execute(
                "SELECT revision FROM stores WHERE tenant_id = ? AND store_id = ?", (tenant_id, store_id)
            ).fetchone()
        return "0" if row is None else str(row[0])

    # -- maintenance --------------------------------------------------------------------------------------------

    def maintain(self, tenant_id: str, store_id: str, *, purge_now: bool = False) -> Maintained:
        """FTS5 `optimize` (all segments merged into one b-tree: deleted rows' postings gone), `PRAGMA optimize`, and
        with `purge_now` a WAL checkpoint (TRUNCATE). No VACUUM: freed pages are reused, the file does not shrink;
        vec0 has no compaction in 0.1.x and no approximate index to build."""
        with self._lock:
            if (store := self._store(tenant_id, store_id)) is None:
                return Maintained(rows=0, compacted=False, vector_index="none", versions_removed=0)
            n = store[0]
            with self._db:
                self._db.execute(f"INSERT INTO f{n} (f{n}) VALUES ('optimize')")
            self._db.execute("PRAGMA optimize")
            if purge_now:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            rows = int(self._db.execute(f"SELECT count(*) FROM c{n}").fetchone()[0])
        return Maintained(rows=rows, compacted=True, vector_index="none", versions_removed=0)

    def close(self) -> None:
        with self._lock:
            self._db.close()
            self._ids.clear()

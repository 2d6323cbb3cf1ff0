"""The embedded `VectorIndex`: chunks and their float32 vectors in the SQLite file, exact search over a cached matrix.

A file's chunks are replaced in one write transaction (SQLite's atomic commit is the crash safety), and the store's
generation is bumped in the same transaction; each process caches a store's normalised matrix with the generation it
was read at and reloads it when the generation has moved (another process, or this one, wrote since).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from shared.storage.sqlite.db import SQLiteDatabase
from shared.storage.vector_index import ChunkHit, IndexedChunk, normalised, top_k

_CACHED_STORES = 64  # matrices kept in memory (least recently used dropped first)
_PAGE = 1000


class _Cached:
    def __init__(self, generation: int, keys: list[tuple[str, int]], matrix: np.ndarray) -> None:
        self.generation = generation
        self.keys = keys  # (file_id, seq) of each row
        self.matrix = matrix


class SQLiteVectorIndex:
    def __init__(self, path: Path, *, busy_timeout_s: float = 5.0) -> None:
        self._db = SQLiteDatabase(path, busy_timeout_s=busy_timeout_s)
        self._cache: dict[tuple[str, str], _Cached] = {}
        self._lock = threading.Lock()

    def _bump(self, db: sqlite3.Connection, tenant_id: str, store_id: str) -> None:
        db.execute(
            "INSERT INTO vector_generations (tenant_id, vector_store_id, generation) VALUES (?, ?, 1)"
            " ON CONFLICT (tenant_id, vector_store_id) DO UPDATE SET generation = generation + 1",
            (tenant_id, store_id),
        )

    def replace_file(self, tenant_id: str, store_id: str, file_id: str, chunks: Sequence[IndexedChunk]) -> None:
        rows = [
            (
                tenant_id, store_id, file_id, c.seq, c.chunk_id, c.text, c.start, c.end, c.heading,
                normalised(c.vector).astype("<f4").tobytes(),
            )
            for c in chunks
        ]  # fmt: skip
        with self._db.write() as db:
            db.execute(
                "DELETE FROM vector_chunks WHERE tenant_id = ? AND vector_store_id = ? AND file_id = ?",
                (tenant_id, store_id, file_id),
            )
            db.executemany(
                "INSERT INTO vector_chunks (tenant_id, vector_store_id, file_id, seq, chunk_id, text, start_offset,"
                " end_offset, heading, vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            self._bump(db, tenant_id, store_id)

    def remove_file(self, tenant_id: str, store_id: str, file_id: str) -> None:
        self.replace_file(tenant_id, store_id, file_id, [])

    def drop_store(self, tenant_id: str, store_id: str) -> None:
        with self._db.write() as db:
            db.execute("DELETE FROM vector_chunks WHERE tenant_id = ? AND vector_store_id = ?", (tenant_id, store_id))
            db.execute(
                "DELETE FROM vector_generations WHERE tenant_id = ? AND vector_store_id = ?", (tenant_id, store_id)
            )
        with self._lock:
            self._cache.pop((tenant_id, store_id), None)

    def drop_tenant(self, tenant_id: str) -> None:
        with self._db.write() as db:
            db.execute("DELETE FROM vector_chunks WHERE tenant_id = ?", (tenant_id,))
            db.execute("DELETE FROM vector_generations WHERE tenant_id = ?", (tenant_id,))
        with self._lock:
            for key in [key for key in self._cache if key[0] == tenant_id]:
                del self._cache[key]

    def _matrix(self, tenant_id: str, store_id: str) -> _Cached:
        key = (tenant_id, store_id)
        with self._db.read() as db:
            row = db.execute(
                "SELECT generation FROM vector_generations WHERE tenant_id = ? AND vector_store_id = ?", key
            ).fetchone()
            generation = 0 if row is None else int(row[0])
            with self._lock:
                cached = self._cache.get(key)
            if cached is not None and cached.generation == generation:
                return cached
            rows = db.execute(
                "SELECT file_id, seq, vector FROM vector_chunks WHERE tenant_id = ? AND vector_store_id = ?"
                " ORDER BY file_id, seq",
                key,
            ).fetchall()
        keys = [(r["file_id"], int(r["seq"])) for r in rows]
        matrix = (
            np.frombuffer(b"".join(r["vector"] for r in rows), dtype="<f4").reshape(len(rows), -1)
            if rows
            else np.zeros((0, 1), dtype=np.float32)
        )
        fresh = _Cached(generation, keys, matrix)
        with self._lock:
            self._cache.pop(key, None)
            self._cache[key] = fresh
            while len(self._cache) > _CACHED_STORES:
                del self._cache[next(iter(self._cache))]
        return fresh

    def search(self, tenant_id: str, store_id: str, vector: np.ndarray, k: int) -> list[ChunkHit]:
        cached = self._matrix(tenant_id, store_id)
        if cached.matrix.shape[0] and cached.matrix.shape[1] != np.asarray(vector).shape[-1]:
            raise ValueError(
                f"query has {np.asarray(vector).shape[-1]} dimensions; the index has {cached.matrix.shape[1]}"
            )
        best = top_k(cached.matrix, np.asarray(vector, dtype=np.float32), k)
        hits = []
        with self._db.read() as db:
            for row, score in best:
                file_id, seq = cached.keys[row]
                found = db.execute(
                    "SELECT * FROM vector_chunks WHERE tenant_id = ? AND vector_store_id = ? AND file_id = ?"
                    " AND seq = ?",
                    (tenant_id, store_id, file_id, seq),
                ).fetchone()
                if found is not None:  # a file replaced between the matrix and this read: skip its stale row
                    hits.append(_hit(found, score))
        return hits

    def chunks(self, tenant_id: str, store_id: str) -> Iterator[ChunkHit]:
        after: tuple[str, int] = ("", -1)
        while True:
            with self._db.read() as db:
                rows = db.execute(
                    "SELECT file_id, seq, chunk_id, text, start_offset, end_offset, heading FROM vector_chunks"
                    " WHERE tenant_id = ? AND vector_store_id = ? AND (file_id, seq) > (?, ?)"
                    " ORDER BY file_id, seq LIMIT ?",
                    (tenant_id, store_id, *after, _PAGE),
                ).fetchall()
            yield from (_hit(row, 0.0) for row in rows)
            if len(rows) < _PAGE:
                return
            after = (rows[-1]["file_id"], int(rows[-1]["seq"]))

    def count(self, tenant_id: str, store_id: str, file_id: str | None = None) -> int:
        query = "SELECT COUNT(*) FROM vector_chunks WHERE tenant_id = ? AND vector_store_id = ?"
        args: tuple[str, ...] = (tenant_id, store_id)
        if file_id is not None:
            query, args = query + " AND file_id = ?", (*args, file_id)
        with self._db.read() as db:
            return int(db.execute(query, args).fetchone()[0])

    def revision(self, tenant_id: str, store_id: str) -> str:
        with self._db.read() as db:
            row = db.execute(
                "SELECT generation FROM vector_generations WHERE tenant_id = ? AND vector_store_id = ?",
                (tenant_id, store_id),
            ).fetchone()
        return str(0 if row is None else int(row[0]))

    def vectors(self, tenant_id: str, store_id: str, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        wanted = list(dict.fromkeys(chunk_ids))
        with self._db.read() as db:
            for start in range(0, len(wanted), 500):  # within SQLite's bound on parameters
                batch = wanted[start : start + 500]
                rows = db.execute(
                    "SELECT chunk_id, vector FROM vector_chunks WHERE tenant_id = ? AND vector_store_id = ?"
                    f" AND chunk_id IN ({', '.join('?' * len(batch))})",
                    (tenant_id, store_id, *batch),
                ).fetchall()
                found.update((row["chunk_id"], np.frombuffer(row["vector"], dtype="<f4")) for row in rows)
        return found

    def close(self) -> None:
        self._db.close()


def _hit(row: sqlite3.Row, score: float) -> ChunkHit:
    return ChunkHit(
        file_id=row["file_id"],
        chunk_id=row["chunk_id"],
        seq=int(row["seq"]),
        text=row["text"],
        start=int(row["start_offset"]),
        end=int(row["end_offset"]),
        heading=row["heading"],
        score=score,
    )

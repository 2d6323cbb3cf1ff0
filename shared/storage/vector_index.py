"""The vector stores' index contract (`VectorIndex`): chunks of files with their embeddings, searched by vector and by
keywords (BM25), written a file at a time.

One adapter, two homes: `LanceVectorIndex` (shared/storage/lance_vector_index.py) keeps one LanceDB table per store in
a directory under the data dir locally, and under the conversations bucket deployed. A file's chunks are written all at
once or not at all (`replace_file`), so a crash mid-ingestion never leaves a file half-indexed: ingestion re-runs and
replaces.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
from pydantic import BaseModel


@dataclass(frozen=True)
class IndexedChunk:
    """What ingestion writes: one chunk of a file's extracted text and its embedding (a dataclass, not a pydantic
    model: ten thousand 384-float vectors are not worth validating one float at a time)."""

    chunk_id: str
    file_id: str
    seq: int
    text: str
    start: int  # character offsets into the file's extracted text
    end: int
    heading: str | None
    vector: np.ndarray  # float32, any length > 0; normalised by the index


class ChunkHit(BaseModel):
    """One chunk found (or listed, `score` 0.0): no vector, everything a citation needs."""

    file_id: str
    chunk_id: str
    seq: int
    text: str
    start: int
    end: int
    heading: str | None = None
    score: float = 0.0


class Maintained(BaseModel):
    """What one maintenance pass did to a store's table."""

    rows: int
    compacted: bool  # small fragments merged and deleted rows' bytes rewritten away
    vector_index: Literal["none", "built", "updated"]
    versions_removed: int  # old versions (and the files only they held) deleted


class VectorIndex(Protocol):
    def replace_file(self, tenant_id: str, store_id: str, file_id: str, chunks: Sequence[IndexedChunk]) -> None:
        """Index the file's chunks in place of any it had, atomically (all or none)."""
        ...

    def remove_file(self, tenant_id: str, store_id: str, file_id: str) -> None: ...

    def drop_store(self, tenant_id: str, store_id: str) -> None:
        """Every chunk of the store gone, its files' bytes deleted at once (erasure)."""
        ...

    def drop_tenant(self, tenant_id: str) -> None: ...

    def search(
        self, tenant_id: str, store_id: str, vector: np.ndarray, k: int, file_ids: Collection[str] | None = None
    ) -> list[ChunkHit]:
        """The `k` chunks most similar to `vector` (cosine), best first; only chunks of `file_ids` where given."""
        ...

    def keyword_search(
        self, tenant_id: str, store_id: str, text: str, k: int, file_ids: Collection[str] | None = None
    ) -> list[ChunkHit]:
        """The `k` chunks that best match `text`'s words (BM25, `score`), best first; none share no word with it."""
        ...

    def chunks(self, tenant_id: str, store_id: str, file_id: str | None = None) -> Iterator[ChunkHit]:
        """Every chunk of the store (or of one file in it), no vectors, by file and position."""
        ...

    def count(self, tenant_id: str, store_id: str, file_id: str | None = None) -> int: ...

    def revision(self, tenant_id: str, store_id: str) -> str:
        """Changes whenever the store's set of chunks changes (a cache key)."""
        ...

    def vectors(self, tenant_id: str, store_id: str, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The normalised vectors of the named chunks; unknown ids are absent."""
        ...

    def stores(self) -> Iterator[tuple[str, str]]:
        """(tenant, store) of every store with a table: what the maintenance job walks."""
        ...

    def maintain(self, tenant_id: str, store_id: str, *, purge_now: bool = False) -> Maintained:
        """Compaction, index builds and old versions' removal for one store (the scheduled maintenance job's unit).
        `purge_now`: deleted chunks' bytes go at once, not after the grace (only where no search may be reading)."""
        ...

    def close(self) -> None: ...


def normalised(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero), float32: cosine similarity becomes a dot product."""
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / np.where(norms == 0, 1, norms)

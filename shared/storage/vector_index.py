"""The vector index's contract (`VectorIndex`) and the exact cosine search both adapters share.

Two adapters: `SQLiteVectorIndex` (embedded: one row per chunk in the SQLite file, float32 blobs, the store's matrix
cached in memory until its generation moves) and `S3VectorIndex` (deployed: one object per indexed file in the S3
bucket). A file's chunks are written all at once or not at all (`replace_file`), so a crash mid-ingestion never
leaves a file half-indexed: ingestion re-runs and replaces.

Search is exact (a matrix-vector product over the store's normalised vectors). Measured on a 2-core machine
(docs/files.md): 10k chunks x 384 dims answer in well under a few milliseconds once the matrix is in memory, so an
approximate index (its recall loss, build time and extra dependency) buys nothing at the sizes a tenant's vector
stores reach here; sqlite-vec was the other candidate, but Python builds without loadable-extension support (this
one's) cannot load it at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

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


class VectorIndex(Protocol):
    def replace_file(self, tenant_id: str, store_id: str, file_id: str, chunks: Sequence[IndexedChunk]) -> None:
        """Index the file's chunks in place of any it had, atomically (all or none)."""
        ...

    def remove_file(self, tenant_id: str, store_id: str, file_id: str) -> None: ...

    def drop_store(self, tenant_id: str, store_id: str) -> None: ...

    def drop_tenant(self, tenant_id: str) -> None: ...

    def search(self, tenant_id: str, store_id: str, vector: np.ndarray, k: int) -> list[ChunkHit]:
        """The `k` chunks most similar to `vector` (cosine), best first."""
        ...

    def chunks(self, tenant_id: str, store_id: str) -> Iterator[ChunkHit]:
        """Every chunk of the store (no vectors), by file and position: a lexical (BM25) index's corpus."""
        ...

    def count(self, tenant_id: str, store_id: str, file_id: str | None = None) -> int: ...

    def revision(self, tenant_id: str, store_id: str) -> str:
        """Changes whenever the store's set of chunks changes (a cache key for indexes built from `chunks`)."""
        ...

    def vectors(self, tenant_id: str, store_id: str, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The normalised vectors of the named chunks; unknown ids are absent."""
        ...

    def close(self) -> None: ...


def normalised(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero), float32: cosine similarity becomes a dot product."""
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / np.where(norms == 0, 1, norms)


def top_k(matrix: np.ndarray, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
    """(row, cosine) of the k best rows of a normalised matrix for a query vector, best first."""
    if matrix.shape[0] == 0 or k <= 0:
        return []
    # einsum, not `@`: a matrix-vector product goes to multi-threaded BLAS, whose spinning threads took 130 ms per
    # 10k x 384 search on a busy 2-core machine (0.3 ms single-threaded, as einsum's own loop is).
    scores = np.einsum("ij,j->i", matrix, normalised(vector.reshape(1, -1))[0])
    k = min(k, scores.shape[0])
    best = np.argpartition(-scores, k - 1)[:k]
    best = best[np.argsort(-scores[best], kind="stable")]
    return [(int(i), float(scores[i])) for i in best]

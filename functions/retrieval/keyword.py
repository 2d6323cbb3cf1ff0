"""The BM25 half of hybrid search: one `bm25s` index per (tenant, vector store, revision), built from the store's chunk
texts on first use and kept in a small LRU cache until the store changes (its revision moves).

Why `bm25s` rather than SQLite FTS5: the vector index has two adapters (SQLite embedded, S3 deployed) and only one of
them has FTS5; `bm25s` (sparse-matrix BM25, Lucene's scoring) runs the same over either, in process, and indexes
10k chunks in well under a second. Stop words are removed (its English list); no stemming (PyStemmer is a compiled
extra the gateway does without)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import bm25s


@dataclass(frozen=True)
class KeywordHit:
    chunk: Any  # the store's hit object for the chunk (text, offsets, file)
    score: float  # BM25; > 0 (chunks sharing no term with the question are never returned)


class KeywordIndex:
    """A built BM25 index of one store's chunks."""

    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = chunks
        self._bm25: bm25s.BM25 | None = None
        if chunks:
            tokens = bm25s.tokenize([c.text for c in chunks], stopwords="en", show_progress=False)
            self._bm25 = bm25s.BM25()
            self._bm25.index(tokens, show_progress=False)

    def search(self, question: str, k: int) -> list[KeywordHit]:
        if self._bm25 is None or k <= 0:
            return []
        terms = bm25s.tokenize([question], stopwords="en", return_ids=False, show_progress=False)
        if not terms[0]:
            return []
        found, scores = self._bm25.retrieve(terms, k=min(k, len(self.chunks)), show_progress=False)
        return [KeywordHit(self.chunks[int(i)], float(s)) for i, s in zip(found[0], scores[0], strict=True) if s > 0.0]


class KeywordIndexes:
    """The BM25 indexes of recently searched stores, by (tenant, store, revision). Thread-safe: built off the event
    loop (a first search of a big store takes a moment), at most one build per key at a time."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._built: OrderedDict[tuple[str, str, str], KeywordIndex] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[tuple[str, str, str], threading.Lock] = {}

    def get(self, tenant_id: str, store_id: str, revision: str, chunks: Callable[[], Iterable[Any]]) -> KeywordIndex:
        key = (tenant_id, store_id, revision)
        with self._lock:
            if (index := self._built.get(key)) is not None:
                self._built.move_to_end(key)
                return index
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                if (index := self._built.get(key)) is not None:
                    return index
            index = KeywordIndex(list(chunks()))
            with self._lock:
                # An older revision of the same store is stale for good: drop it now rather than by age.
                for stale in [k for k in self._built if k[:2] == key[:2]]:
                    del self._built[stale]
                self._built[key] = index
                while len(self._built) > self.capacity:
                    self._built.popitem(last=False)
                self._building.pop(key, None)
        return index

"""The files service's search as chat's hybrid retrieval (functions/retrieval/hybrid.py) uses it, over one index in
this process: what the BEIR eval and the bench drive the real retrieval code with, without a gateway. The question's
vector is given (embedded beforehand), every chunk of the store counts (no attachment records)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np


class IndexStores:
    def __init__(self, index: Any, tenant_id: str, filename: str = "document") -> None:
        self.index, self.tenant_id, self.filename = index, tenant_id, filename
        self.question = np.zeros(1, dtype=np.float32)  # set before each search

    def _named(self, store_id: str, hits: list[Any]) -> list[Any]:
        return [SimpleNamespace(**h.model_dump(), vector_store_id=store_id, filename=self.filename) for h in hits]

    async def require(self, caller: Any, vector_store_id: str) -> Any:
        return SimpleNamespace(id=vector_store_id, revision=self.index.revision(self.tenant_id, vector_store_id))

    async def embed_query(self, caller: Any, text: str) -> np.ndarray:
        return self.question

    async def search(
        self, caller: Any, vector_store_id: str, query_text: str, k: int = 10, query_vector: Any = None,
        filters: Any = None,
    ) -> list[Any]:  # fmt: skip
        vector = self.question if query_vector is None else query_vector
        return self._named(vector_store_id, self.index.search(self.tenant_id, vector_store_id, vector, k))

    def keyword_search(self, tenant_id: str, vector_store_id: str, text: str, k: int, filters: Any = None) -> Any:
        return self._named(vector_store_id, self.index.keyword_search(tenant_id, vector_store_id, text, k))

    def vectors(self, tenant_id: str, vector_store_id: str, chunk_ids: list[str]) -> dict[str, np.ndarray]:
        return self.index.vectors(tenant_id, vector_store_id, chunk_ids)

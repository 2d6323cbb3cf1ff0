"""The retrieval eval's corpus on the deployment under test, through its public API only: upload the documents, put
them in a fresh vector store, wait for ingestion, and remove everything afterwards."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from functions.offline.evals.rag.items import Document

INGESTION_TIMEOUT_S = 900.0  # the CPU stack embeds ~100k characters in a minute or two when it is not busy
POLL_S = 1.0


class CorpusError(RuntimeError):
    """The corpus could not be put on the deployment (upload refused, ingestion failed or too slow)."""


@dataclass(frozen=True)
class Corpus:
    store_id: str
    documents: dict[str, str]  # document id by file id
    ingestion_s: float


async def _checked(response: httpx.Response, what: str) -> dict:
    if response.status_code >= 400:
        raise CorpusError(f"{what}: HTTP {response.status_code} {response.text[:200]}")
    return response.json()


async def create_corpus(http: httpx.AsyncClient, documents: Sequence[Document], name: str) -> Corpus:
    started = time.monotonic()
    files: dict[str, str] = {}
    for document in documents:
        upload = await http.post(
            "/v1/files",
            files={"file": (document.filename, document.text.encode(), "text/plain")},
            data={"purpose": "assistants"},
        )
        files[(await _checked(upload, f"uploading {document.filename}"))["id"]] = document.id
    created = await http.post("/v1/vector_stores", json={"name": name, "file_ids": list(files)})
    store_id = (await _checked(created, "creating the vector store"))["id"]
    deadline = time.monotonic() + INGESTION_TIMEOUT_S
    while True:
        counts = (await _checked(await http.get(f"/v1/vector_stores/{store_id}"), "reading the store"))["file_counts"]
        if counts["failed"] or counts["cancelled"]:
            raise CorpusError(f"ingestion failed: {counts}")
        if counts["completed"] == len(files):
            return Corpus(store_id, files, time.monotonic() - started)
        if time.monotonic() > deadline:
            raise CorpusError(f"ingestion did not finish in {INGESTION_TIMEOUT_S:.0f} s: {counts}")
        await asyncio.sleep(POLL_S)


async def remove_corpus(http: httpx.AsyncClient, corpus: Corpus) -> None:
    """Best effort: the store, then its files (a failed delete leaves them to the tenant's retention)."""
    try:
        await http.delete(f"/v1/vector_stores/{corpus.store_id}")
        for file_id in corpus.documents:
            await http.delete(f"/v1/files/{file_id}")
    except httpx.HTTPError:
        pass

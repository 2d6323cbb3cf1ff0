"""The `make bench` retrieval phase, shrunk, against a real gateway (uvicorn, SQLite) and a stand-in embedding worker
over loopback: public articles typeset as multi-page PDFs are ingested through the API to `completed` (pages per
second from real uploads), the gateway's search and chat retrieval are timed, and the in-process store is searched."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.progress import Progress

from functions.files.extract import extract_text
from functions.offline.bench.phases.retrieval_phase import retrieval_phase, typeset
from functions.offline.bench.results.retrieval_results import retrieval_lines
from functions.offline.evals.rag.items import load_documents
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.servers import serve
from tests.support.stand_ins.embedding_stand_in import EmbeddingStandIn
from tests.support.stand_ins.stand_in import stand_in_worker


@pytest.fixture
def gateway(gateway_for: GatewayFactory) -> Iterator[Gateway]:
    with serve(stand_in_worker("ok")) as chat, serve(EmbeddingStandIn().app()) as embeddings:
        yield gateway_for({"mini": [chat]}, embedding_worker_urls={"text-embedding-minilm": [embeddings]})


def test_a_public_article_is_typeset_into_pages_whose_text_extracts_back() -> None:
    article = load_documents()[0]
    body, pages = typeset(article)
    text = extract_text("pdf", body)
    assert pages >= 5 and body.startswith(b"%PDF")
    paragraph = article.text.split("\n\n")[3]
    assert " ".join(paragraph.split()[:12]) in " ".join(text.split())  # wrapped lines read back as the paragraph


def test_the_phase_measures_ingestion_and_search_through_the_gateway(gateway: Gateway, tmp_path: Path) -> None:
    with Progress(disable=True) as progress:
        result = asyncio.run(
            retrieval_phase(
                gateway.url, progress, keys_path=tmp_path / "keys.json", admin_key=None, api_key=gateway.key,
                quick=True, chunks=300,
            )
        )  # fmt: skip
    ingestion = result.ingestion
    assert ingestion is not None and ingestion.files == 2 and ingestion.failed == 0
    assert ingestion.pages == sum(typeset(d)[1] for d in load_documents()[:2]) and ingestion.pages_per_s > 0
    assert [row.runs for row in result.gateway] == [10, 10]  # every search answered, every chat retrieval used
    assert all(row.runs == 10 and row.p50_ms is not None for row in result.engine)
    assert "pages/s" in "\n".join(retrieval_lines(result))

"""The web chat's files in real Chromium against the real gateway (uvicorn, SQLite, its files and vector stores), a
stand-in embedding worker (hashed bags of words: the model is not the point) and a stand-in chat worker that records
what it was sent. The document is a public SQuAD article (functions/offline/evals/rag/data, CC BY-SA 4.0).

Checked: a Markdown file dropped on the chat is uploaded, added to the chat's vector store and shown indexing until it
completes; the next question names the store (the worker gets the passages); the answer lists its citation, which
opens the cited passage highlighted in its context, also after a reload (stored citations carry no text: the page
reads the chunk back); the files panel lists the file with its size and deletes it after a confirmation. A file whose
content is not its declared type shows the API's 400 message and nothing is attached; a file over the tenant's size
limit shows the 413 message; a PDF that cannot be read is attached and fails indexing with ingestion's message."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from functions.offline.evals.rag.items import load_documents
from shared.fleet.tiers import LimitOverrides
from shared.storage.accounts import TenantChanges
from shared.storage.sqlite.accounts import SQLiteStore
from tests.browser.conftest import screenshot
from tests.browser.test_web_chat import assistant, sign_in, wait_status
from tests.integration.conftest import Gateway, GatewayFactory, gateway_for  # noqa: F401 (a fixture)
from tests.support.documents import malformed_pdf
from tests.support.servers import serve
from tests.support.stand_ins.embedding_stand_in import EmbeddingStandIn
from tests.support.stand_ins.stand_in import stand_in_worker

pytestmark = pytest.mark.browser

EMBEDDING_MODEL = "text-embedding-minilm"
QUESTION = "Who was the leader of the Norse raiders?"
ANSWER = "Their leader was Rollo [1]."
INGESTION_WAIT_MS = 120_000


def _document() -> str:
    """A small Markdown file: the heading and the first five paragraphs of SQuAD's "Normans" article."""
    article = next(d for d in load_documents() if d.title == "Normans")
    paragraphs = article.text.split("\n\n")[1:6]
    return "# Normans\n\n" + "\n\n".join(paragraphs) + "\n"


DOCUMENT = _document()


@pytest.fixture
def stack(gateway_for: GatewayFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Gateway, FastAPI]]:  # noqa: F811
    # The shared 2-core machine can be slow: a retrieval skipped for its latency budget is not what this test is about.
    monkeypatch.setenv("FLEETCHAT_RETRIEVAL_BUDGET_MS", "20000")
    worker = stand_in_worker(ANSWER)
    with serve(worker) as chat, serve(EmbeddingStandIn().app()) as embeddings:
        gateway = gateway_for(
            {"mini": [chat], "flagship": [chat]}, embedding_worker_urls={EMBEDDING_MODEL: [embeddings]}
        )
        yield gateway, worker


def _get(gateway: Gateway, path: str) -> dict[str, Any]:
    response = httpx.get(f"{gateway.url}{path}", headers=gateway.headers(), timeout=30)
    response.raise_for_status()
    return response.json()


def _drop(page: Any, name: str, text: str, mime: str) -> None:
    """Drag a file over the chat and drop it, as a person does from their file manager."""
    transfer = page.evaluate_handle(
        """([name, text, mime]) => {
            const transfer = new DataTransfer();
            transfer.items.add(new File([text], name, { type: mime }));
            return transfer;
        }""",
        [name, text, mime],
    )
    page.dispatch_event("main.main", "dragenter", {"dataTransfer": transfer})
    page.dispatch_event("main.main", "dragover", {"dataTransfer": transfer})
    page.get_by_test_id("drop-zone").wait_for()
    page.dispatch_event("main.main", "drop", {"dataTransfer": transfer})


def _context_message(body: dict[str, Any]) -> str | None:
    before = body["messages"][-2] if len(body["messages"]) >= 2 else None
    return before["content"] if before and before["role"] == "system" and "[1]" in before["content"] else None


def _open_cited_passage(page: Any) -> str:
    """Click the answer's first citation; the dialog's highlighted span (checked against the file's text)."""
    citation = assistant(page).get_by_test_id("citation").first
    citation.wait_for()
    assert "normans.md" in citation.inner_text()
    citation.click()
    page.get_by_test_id("passage").wait_for()
    cited = page.get_by_test_id("passage-cited")
    cited.wait_for()
    text = cited.inner_text()
    context = page.get_by_test_id("passage-text").inner_text()
    assert text.strip() and text.strip() in context and len(context) > len(text)  # shown within its context
    return text


def test_attach_a_document_ask_about_it_and_open_the_cited_passage(page: Any, stack: tuple[Gateway, FastAPI]) -> None:
    gateway, worker = stack
    sign_in(page, gateway.url, gateway.key)
    _drop(page, "normans.md", DOCUMENT, "text/markdown")
    chip = page.get_by_test_id("attachment")
    chip.wait_for()
    assert "normans.md" in chip.inner_text()
    page.wait_for_selector('[data-testid="attachment"][data-status="completed"]', timeout=INGESTION_WAIT_MS)
    assert "Ready" in chip.inner_text()
    screenshot(page, "30-file-attached")

    composer = page.get_by_test_id("composer")
    composer.fill(QUESTION)
    composer.press("Enter")
    assert wait_status(page, ("done",), timeout_ms=60_000) == "done"
    # The request named the chat's store: the gateway searched it and the worker read the passages.
    body = worker.state.bodies[-1]
    context = _context_message(body)
    assert context is not None and "[1] normans.md" in context and body["messages"][-1]["content"] == QUESTION
    assert "vector_store_ids" not in body

    conversation_id = page.evaluate("() => location.hash").removeprefix("#/c/")
    stored = _get(gateway, f"/v1/conversations/{conversation_id}")["messages"][-1]
    first = next(c for c in stored["citations"] if c["index"] == 1)
    expected = DOCUMENT[first["start"] : first["end"]]  # a Markdown file's offsets are offsets into the file
    assert "Rollo" in expected  # the passage that answers the question is the one cited [1]

    citations = assistant(page).get_by_test_id("citation")
    assert citations.count() == 1  # the answer refers to [1] only: only that source is listed
    assert " ".join(expected.split())[:60] in " ".join(citations.first.inner_text().split())  # the passage's start
    assert _open_cited_passage(page) == expected
    screenshot(page, "31-cited-passage")
    page.keyboard.press("Escape")
    page.get_by_test_id("passage").wait_for(state="detached")

    # After a reload the stored citation (no text) still lists its passage and opens it; the chip is back too.
    page.reload()
    wait_status(page, ("done",))
    listed = assistant(page).get_by_test_id("citation").first
    page.wait_for_function(  # the passage's start, read back from the file (the stored citation has no text)
        "([el, start]) => el.innerText.replace(/\\s+/g, ' ').includes(start)",
        arg=[listed.element_handle(), " ".join(expected.split())[:60]],
    )
    assert _open_cited_passage(page) == expected
    page.keyboard.press("Escape")
    page.wait_for_selector('[data-testid="attachment"][data-status="completed"]')
    screenshot(page, "32-citation-after-reload")
    page.get_by_test_id("theme-toggle").click()
    assert _open_cited_passage(page) == expected
    screenshot(page, "32-cited-passage-dark")
    page.keyboard.press("Escape")

    # The files panel lists the file (size, status, date) and deletes it after a confirmation.
    page.get_by_test_id("files-open").click()
    row = page.get_by_test_id("file-row")
    row.wait_for()
    assert "normans.md" in row.inner_text() and "KB" in row.get_by_test_id("file-size").inner_text()
    assert row.get_by_test_id("file-status").inner_text() == "Ready in this chat"
    screenshot(page, "33-files-panel")
    row.get_by_test_id("file-delete").click()
    page.get_by_test_id("file-delete-cancel").click()  # Cancel keeps it
    assert _get(gateway, "/v1/files")["data"]
    page.get_by_test_id("file-delete").click()
    page.get_by_test_id("file-delete-confirm").click()
    page.get_by_test_id("files-empty").wait_for()
    assert _get(gateway, "/v1/files")["data"] == []
    page.get_by_test_id("files-close").click()
    page.get_by_test_id("attachment").wait_for(state="detached")  # its chip went with it


def test_a_file_that_is_not_its_declared_type_is_refused_and_nothing_is_attached(
    page: Any, stack: tuple[Gateway, FastAPI]
) -> None:
    gateway, worker = stack
    store = SQLiteStore(gateway.data_dir / "fleetchat.db")
    try:
        owner = next(t for t in store.list_tenants() if t.name == "owner")
        store.update_tenant(owner.id, TenantChanges(limits=LimitOverrides(max_file_bytes=2000)))
    finally:
        store.close()
    fake_pdf = b"Just a few words of plain text, named as if it were a PDF."
    # What the API itself says about this upload (a 400 stores nothing, so asking it changes nothing).
    refused = httpx.post(
        f"{gateway.url}/v1/files",
        headers=gateway.headers(),
        files={"file": ("scan.pdf", fake_pdf, "application/pdf")},
        data={"purpose": "assistants"},
    )
    assert refused.status_code == 400
    message = refused.json()["error"]["message"]

    sign_in(page, gateway.url, gateway.key)
    attach = page.get_by_role("button", name="Attach files")  # the keyboard's way in: a labelled button
    with page.expect_file_chooser() as chooser:
        attach.click()
    chooser.value.set_files(files=[{"name": "scan.pdf", "mimeType": "application/pdf", "buffer": fake_pdf}])
    page.wait_for_selector('[data-testid="attachment"][data-status="rejected"]')
    assert page.get_by_test_id("attachment-error").inner_text() == message
    screenshot(page, "34-file-refused")
    # At a phone's width the chip, the paperclip and Send still fit the screen.
    page.set_viewport_size({"width": 375, "height": 740})
    page.wait_for_function("() => document.querySelector('.sidebar').getBoundingClientRect().right <= 0")  # slid out
    for test_id in ("attachment", "attach", "send"):
        box = page.get_by_test_id(test_id).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375, (test_id, box)
    screenshot(page, "35-file-refused-phone")
    page.set_viewport_size({"width": 1280, "height": 860})
    assert _get(gateway, "/v1/files")["data"] == []
    assert _get(gateway, "/v1/vector_stores")["data"] == []  # no store was made for a file that was refused

    composer = page.get_by_test_id("composer")
    composer.fill("What does my file say?")
    composer.press("Enter")
    wait_status(page, ("done",), timeout_ms=60_000)
    assert _context_message(worker.state.bodies[-1]) is None  # nothing attached: nothing searched

    # A PDF that passes the type check but cannot be read: attached, then its indexing fails with ingestion's message.
    page.get_by_test_id("attachment-remove").click()
    page.get_by_test_id("attach-input").set_input_files(
        files=[{"name": "broken.pdf", "mimeType": "application/pdf", "buffer": malformed_pdf()}]
    )
    failed = page.locator('[data-testid="attachment"][data-status="failed"]')
    failed.wait_for(timeout=INGESTION_WAIT_MS)
    store_id = _get(gateway, "/v1/vector_stores")["data"][0]["id"]
    file_id = failed.get_attribute("data-file-id")
    last_error = _get(gateway, f"/v1/vector_stores/{store_id}/files/{file_id}")["last_error"]
    assert last_error["message"] and failed.get_by_test_id("attachment-error").inner_text() == last_error["message"]
    screenshot(page, "36-file-failed")

    # A file over the tenant's size limit: the files panel shows the 413's message.
    page.get_by_test_id("files-open").click()
    page.get_by_test_id("file-row").wait_for()  # broken.pdf
    page.get_by_test_id("files-upload-input").set_input_files(
        files=[{"name": "big.txt", "mimeType": "text/plain", "buffer": b"x" * 3000}]
    )
    error = page.get_by_test_id("files-error")
    error.wait_for()
    assert error.inner_text() == "big.txt: The file is 3000 bytes; your tier accepts files of at most 2000 bytes."
    assert [f["filename"] for f in _get(gateway, "/v1/files")["data"]] == ["broken.pdf"]

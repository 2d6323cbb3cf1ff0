"""Upload checks and text preparation: type by content (not by name), text extracted by the maintained parsers from
real documents, chunks cut by structure whose offsets slice the extracted text exactly."""

from __future__ import annotations

import itertools
import re

import pytest

from functions.files.chunking import chunk_text
from functions.files.extract import ExtractionError, extract_text
from functions.files.sniff import checked_kind
from shared.errors import InvalidRequestError
from shared.fleet.embedding_pools import packaged_tokenizer
from shared.fleet.tables import tables
from tests.support.documents import docx_with, malformed_pdf, pdf_with_pages

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def _check(name: str, body: bytes, media_type: str | None = None) -> str:
    return checked_kind(name, media_type, body[:8192], body)


def test_each_supported_kind_passes_when_its_content_matches() -> None:
    assert _check("a.pdf", pdf_with_pages([["hello"]])) == "pdf"
    assert _check("a.docx", docx_with("T", ["p"])) == "docx"
    assert _check("a.md", "# Title\n\nText é".encode()) == "markdown"
    assert _check("a.html", b"<p>hi</p>") == "html"
    assert _check("notes", b"plain", "text/plain") == "text"  # no extension: the declared type is the claim


@pytest.mark.parametrize(
    ("name", "body", "found"),
    [
        ("report.pdf", PNG, "not a supported type"),
        ("report.pdf", b"just text", "text"),
        ("notes.txt", pdf_with_pages([["x"]]), "a PDF"),
        ("notes.md", b"\xff\xfe\x00binary", "not a supported type"),
        ("letter.docx", pdf_with_pages([["x"]]), "a PDF"),
    ],
)
def test_content_that_is_not_the_claimed_type_is_a_400_naming_what_it_is(name: str, body: bytes, found: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        _check(name, body)
    assert caught.value.code == "invalid_file" and found in caught.value.message


def test_an_unsupported_extension_is_a_400() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        _check("photo.png", PNG, "image/png")
    assert caught.value.code == "unsupported_file"


def test_text_comes_out_of_pdf_docx_and_html_with_headings_as_markdown() -> None:
    pdf = extract_text("pdf", pdf_with_pages([["Opening hours", "We open at nine."], ["Closed on Sundays."]]))
    assert "We open at nine." in pdf and "Closed on Sundays." in pdf
    assert extract_text("docx", docx_with("Install", ["Run make up."])) == "# Install\n\nRun make up."
    html = b"<html><head><script>steal()</script></head><body><h2>Usage</h2><p>Call it\n twice.</p></body></html>"
    assert extract_text("html", html) == "## Usage\n\nCall it\ntwice."


def test_a_malformed_pdf_is_an_extraction_error_with_a_clear_message() -> None:
    with pytest.raises(ExtractionError) as caught:
        extract_text("pdf", malformed_pdf())
    assert caught.value.code == "invalid_file" and "PDF could not be read" in caught.value.message


def test_a_file_without_text_is_an_extraction_error() -> None:
    with pytest.raises(ExtractionError):
        extract_text("html", b"<html><body><script>x()</script></body></html>")


def _spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(r"\S+", text)]


def test_chunks_follow_headings_and_paragraphs_and_slice_the_text_exactly() -> None:
    text = "# Guide\n\nIntro.\n\n## Install\n\nStep one.\n\nStep two.\n\n## Use\n\nCall it."
    chunks = chunk_text(text, _spans, max_tokens=50, overlap_tokens=5)
    assert [c.heading for c in chunks] == ["Guide", "Guide > Install", "Guide > Use"]
    assert [c.text for c in chunks] == [
        "# Guide\n\nIntro.",
        "## Install\n\nStep one.\n\nStep two.",
        "## Use\n\nCall it.",
    ]
    assert all(text[c.start : c.end] == c.text for c in chunks)


def test_long_sections_are_packed_within_the_budget_with_overlap() -> None:
    paragraphs = [" ".join(f"p{i}w{j}" for j in range(6)) for i in range(10)]
    text = "# Long\n\n" + "\n\n".join(paragraphs)
    chunks = chunk_text(text, _spans, max_tokens=20, overlap_tokens=6)
    assert len(chunks) > 2
    assert all(len(_spans(c.text)) <= 20 for c in chunks)
    for before, after in itertools.pairwise(chunks):
        assert after.start < before.end  # the previous chunk's last paragraph is repeated
    assert all(p in " ".join(c.text for c in chunks) for p in paragraphs)


def test_a_paragraph_longer_than_a_chunk_is_cut_at_token_boundaries_with_overlap() -> None:
    text = " ".join(f"word{i}" for i in range(100))
    chunks = chunk_text(text, _spans, max_tokens=30, overlap_tokens=10)
    assert all(len(_spans(c.text)) <= 30 and text[c.start : c.end] == c.text for c in chunks)
    assert chunks[0].text.startswith("word0 ") and chunks[-1].text.endswith("word99")
    assert chunks[1].text.startswith("word20 ")


def test_chunks_fit_the_embedding_models_own_token_limit() -> None:
    tokenizer = packaged_tokenizer(tables().embedding_pools["text-embedding-minilm"].local.directory())

    def spans(text: str) -> list[tuple[int, int]]:
        return [tuple(o) for o in tokenizer.encode(text, add_special_tokens=False).offsets]

    text = "# Manual\n\n" + "\n\n".join(
        "Configuration values are read from environment variables. " * 12 for _ in range(5)
    )
    for chunk in chunk_text(text, spans, max_tokens=200):
        assert len(tokenizer.encode(chunk.text).ids) <= 256

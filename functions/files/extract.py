"""A file's text, by maintained parsers: pypdf (PDF), python-docx (DOCX), Beautiful Soup on lxml (HTML); Markdown and
plain text are their own text. Headings come out as Markdown headings (`# Title`) and paragraphs apart by a blank
line, so one chunker (functions/files/chunking.py) splits every kind by its structure.

A file that cannot be parsed (a malformed PDF, a DOCX that is not a word-processing zip) or that has no text raises
`ExtractionError` with a message for the vector-store file's `last_error`.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable

from shared.wire.files_api import LastErrorCode


class ExtractionError(Exception):
    def __init__(self, code: LastErrorCode, message: str) -> None:
        super().__init__(message)
        self.code: LastErrorCode = code
        self.message = message


_BLANK_RUNS = re.compile(r"\n[ \t\r\f\v]*(?:\n[ \t\r\f\v]*)+")
_SPACES = re.compile(r"[ \t\r\f\v]+")


def _tidy(text: str) -> str:
    """Spaces collapsed within lines, paragraphs apart by exactly one blank line."""
    lines = [_SPACES.sub(" ", line).strip() for line in text.replace("\r\n", "\n").split("\n")]
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()


def _pdf(body: bytes) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(body), strict=False)
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as exc:
        raise ExtractionError("invalid_file", f"The PDF could not be read ({type(exc).__name__}: {exc}).") from exc
    return "\n\n".join(_tidy(page) for page in pages)


def _docx(body: bytes) -> str:
    import zipfile

    import docx
    from docx.opc.exceptions import PackageNotFoundError

    try:
        document = docx.Document(io.BytesIO(body))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise ExtractionError("invalid_file", f"The DOCX document could not be read ({exc}).") from exc
    blocks = []
    for paragraph in document.paragraphs:
        text = paragraph.text.strip()
        style = (paragraph.style.name if paragraph.style is not None else "") or ""
        level = 1 if style == "Title" else int(style[8:]) if re.fullmatch(r"Heading [1-6]", style) else 0
        if text:
            blocks.append(("#" * level + " " if level else "") + text)
    for table in document.tables:
        rows = [" | ".join(cell.text.strip() for cell in row.cells) for row in table.rows]
        blocks.append("\n".join(row for row in rows if row.strip(" |")))
    return "\n\n".join(_tidy(block) for block in blocks if block.strip())


_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_BLOCKS = ("p", "li", "pre", "blockquote", "tr", "dt", "dd", "div", "section", "article", "br", "table", "figcaption")


def _html(body: bytes) -> str:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(body, "lxml")
    for tag in soup(["script", "style", "noscript", "template", "head"]):
        tag.decompose()
    for tag in soup.find_all(_HEADINGS):
        text = tag.get_text(" ", strip=True)
        tag.replace_with(f"\n\n{'#' * int(tag.name[1])} {text}\n\n" if text else "")
    for tag in soup.find_all(_BLOCKS):
        tag.insert_before("\n\n")
        tag.insert_after("\n\n")
    return _tidy(soup.get_text())


def _text(body: bytes) -> str:
    return body.decode("utf-8-sig").replace("\r\n", "\n")


EXTRACTORS: dict[str, Callable[[bytes], str]] = {
    "pdf": _pdf,
    "docx": _docx,
    "html": _html,
    "markdown": _text,
    "text": _text,
}


def extract_text(kind: str, body: bytes) -> str:
    """The file's text (headings as `#` lines); raises ExtractionError when it cannot be read or has no text."""
    extractor = EXTRACTORS.get(kind)
    if extractor is None:
        raise ExtractionError("unsupported_file", f"Files of kind `{kind}` cannot be indexed.")
    text = extractor(body)
    if not text.strip():
        raise ExtractionError(
            "invalid_file", "No text could be extracted from the file (a scanned PDF needs OCR, which is not done)."
        )
    return text
